"""Reading torch's tree manager: its functions, nodes, paths, outputs and generations, and why it
ran a call eagerly or recorded again (names declared in the package)."""

from __future__ import annotations

import contextlib
import sys
import weakref
from typing import Any, Callable, Optional

import torch

from cgviz.observe import frames
from cgviz.observe._torch_layout import (
    CHECKED_DEAD, CPP_HELD_CACHED_OUTPUT_LIVE, EAGER_MANAGED_INPUT_LIMIT, EAGER_MUTATION, EAGER_RERECORD_LIMIT, MANAGER_CLASS,
    MANAGER_INIT, NODE_RECORD, NODE_REPLAY, RUN_METHODS, STORAGE_USE_COUNT, TREES_MODULE, WARMUP_NODE_CLASS, has_since,
)
from cgviz.observe.lookups import read
from cgviz.observe.torch_words import device_name, torch_id_words


def manager_class() -> Any:
    """torch's CUDAGraphTreeManager class (importing its module)."""
    from torch._inductor import cudagraph_trees

    return getattr(cudagraph_trees, MANAGER_CLASS)


def run_method(manager_cls: Any) -> str:
    """The first of RUN_METHODS that this torch's manager has."""
    return next((name for name in RUN_METHODS if hasattr(manager_cls, name)), RUN_METHODS[-1])


def function_label(manager: Any, function_id: Any) -> tuple[str, str]:
    """(name, mode) of a function of the manager: 'forward', 'backward' or 'inference'."""
    name = None
    getter = getattr(manager, "get_func_name", None)
    if getter is not None:
        try:
            name = getter(function_id)
        except Exception:
            name = None
    if not name:
        name = f"function {getattr(function_id, 'id', function_id)}"
    modes = read(manager, "id_to_mode", {}) or {}
    mode = getattr(modes.get(function_id), "name", "")
    return name, mode.lower()


def compile_id(manager: Any, function_id: Any) -> str:
    ids = read(manager, "id_to_compile_id", {}) or {}
    value = ids.get(function_id)
    return "" if value is None else str(value)


def stack_traces(manager: Any, function_id: Any) -> list[str]:
    """The stack traces torch keeps for a function's outputs (where each was computed)."""
    traces = (read(manager, "ids_to_stack_traces", {}) or {}).get(function_id) or ()
    return [t for t in traces if isinstance(t, str) and t]


def added_function_id(added: Any) -> Any:
    """The function id of what the manager's add_function returned: (fn, outputs), fn being
    functools.partial(manager.run, function_id=...)."""
    fn = added[0] if isinstance(added, tuple) and added else None
    return (getattr(fn, "keywords", None) or {}).get("function_id")


def _skip_hints(manager: Any) -> dict:
    """torch's per-(node, function) "run this eagerly here" marks: skip_cudagraph from 2.15 (a
    mutation of an unmanaged input, or an edge past the managed-input limit with action "skip"),
    non_cudagraph_managed_mutation_hint before."""
    name = "skip_cudagraph" if has_since("CUDAGraphTreeManager.skip_cudagraph") else "non_cudagraph_managed_mutation_hint"
    return read(manager, name, {}) or {}


def eager_cause(manager: Any, function_id: Any) -> str:
    """Why torch's manager ran a call of this function eagerly, from its own state right after
    the call: EAGER_MUTATION (it marked the function as writing in place to inputs the tree does
    not manage, at the current node), EAGER_MANAGED_INPUT_LIMIT (2.15: an input of the path kept
    moving there, action "skip"), EAGER_RERECORD_LIMIT (past its re-record limit there), or ''
    when its state says neither."""
    get_node_id = read(manager, "_get_node_id")
    limit = read(manager, "exceed_rerecord_limit")
    try:
        node_id = get_node_id() if get_node_id is not None else None
        if (_skip_hints(manager).get(node_id) or {}).get(function_id):
            if managed_input_limit_reached(manager, node_id, function_id):
                return EAGER_MANAGED_INPUT_LIMIT
            return EAGER_MUTATION
        if limit is not None and limit(node_id, function_id):
            return EAGER_RERECORD_LIMIT
    except Exception:
        pass
    return ""


def managed_input_limit_reached(manager: Any, node_id: Any, function_id: Any) -> bool:
    """2.15, action "skip": has an input slot of this edge moved as often as the limit allows?"""
    if not has_since("CUDAGraphTreeManager.cudagraph_managed_input_rerecord"):
        return False
    counts = ((getattr(manager, "cudagraph_managed_input_rerecord", None) or {}).get(node_id) or {}).get(function_id)
    wrapped = (getattr(manager, "ids_to_funcs", None) or {}).get(function_id)
    limit = getattr(wrapped, "cudagraph_managed_input_rerecord_limit", None)
    return bool(counts) and isinstance(limit, int) and max(counts.values()) >= limit


def demoted_inputs(manager: Any, node_id: Any, function_id: Any) -> set:
    """2.15: the input slots of this edge torch copies now instead of re-recording."""
    demoted = getattr(manager, "demoted_cudagraph_managed_idxs", None) or {}
    return set((demoted.get(node_id) or {}).get(function_id) or ())


def managed_input_rule(manager: Any, function_id: Any) -> tuple[str, Any]:
    """2.15: (action, limit) of a function's managed-input re-record rule."""
    wrapped = (getattr(manager, "ids_to_funcs", None) or {}).get(function_id)
    return (str(getattr(wrapped, "cudagraph_managed_input_rerecord_action", "copy")),
            getattr(wrapped, "cudagraph_managed_input_rerecord_limit", None))


def is_kernel_free(node: Any) -> bool:
    """2.14+: a node whose function launches no kernels: torch keeps no CUDA graph for it."""
    return bool(getattr(getattr(node, "wrapped_function", None), "kernel_free_cudagraph", False))


def cloned_outputs(manager: Any, storages_to_clone: Any) -> list[tuple[Any, int, int]]:
    """2.14+: what _clone_live_user_visible_storages is about to clone, as (node, output index,
    bytes): each group's entries hold the outputs_weakrefs list of a node on the current path."""
    path = path_to(current_node(manager))
    found: list[tuple[Any, int, int]] = []
    if not isinstance(storages_to_clone, (list, tuple)):
        return found
    for _storage, entries in storages_to_clone:
        for output_weakrefs, _tensors, _cached, index in entries:
            owner = next((n for n in path if getattr(n, "outputs_weakrefs", None) is output_weakrefs), None)
            if owner is None:
                continue
            meta = output_metadata(owner)
            entry = meta[index] if index < len(meta) and isinstance(meta[index], dict) else {}
            found.append((owner, index, int(entry.get("nbytes", 0) or 0)))
    return found


def node_function(node: Any) -> Any:
    wrapped = read(node, "wrapped_function")
    return getattr(wrapped, "id", None)


def node_parent(node: Any) -> Any:
    return read(node, "parent")


def path_to(node: Any) -> list:
    """`node` and its ancestors up to its root, nearest first ([] for None)."""
    path = []
    while node is not None:
        path.append(node)
        node = node_parent(node)
    return path


def node_children(node: Any) -> list:
    children = getattr(node, "children", None) or {}
    return [c for nodes in children.values() for c in nodes]


def current_node(manager: Any) -> Any:
    """The node the manager's current path ends at (None at the roots)."""
    return read(manager, "current_node")


def path_state(manager: Any) -> Optional[str]:
    """The state of the manager's path in torch's words ("NONE", "WARMUP", "RECORDING", "EXECUTION")."""
    return getattr(read(manager, "path_state"), "name", None)


def already_warm(node: Any) -> bool:
    """Had this warmup node's function warmed up before this run (torch's warmed_up_functions)?
    Then it runs eagerly again because its path is warming up."""
    return bool(getattr(node, "already_warm", False))


def roots(manager: Any) -> list:
    by_function = read(manager, "roots", {}) or {}
    return [n for nodes in by_function.values() for n in nodes]


def recorded_nodes(manager: Any) -> list:
    """The graphs torch recorded in `manager`'s tree, breadth first from its roots."""
    found: list[Any] = roots(manager)
    for node in found:  # the list grows as it is walked
        found.extend(node_children(node))
    return found


def output_refs(node: Any) -> list:
    return list(read(node, "outputs_weakrefs", []) or [])


def tracked_outputs(node: Any, reads: Optional["FoundDead"] = None) -> tuple[int, ...]:
    """The indices of the outputs torch keeps a weak reference to (not those that are None or
    a number, an alias of a static input or an empty storage): each one is in the list a replay
    returns. torch sets them when it records the node; `reads` keeps them for the node's later
    replays, which need not read each wrapper again."""
    refs = read(node, "outputs_weakrefs", None) or ()
    if reads is not None and reads.tracked is not None and reads.tracked[0] == len(refs):
        return reads.tracked[1]
    tracked = tuple(i for i, ref in enumerate(refs) if ref is not None)
    if reads is not None:
        reads.tracked = (len(refs), tracked)
    return tracked


def found_dead_by_torch(node: Any) -> list[tuple[Any, tuple[int, ...]]]:
    """(ancestor, output indices): the outputs of `node`'s path that torch found dead before it
    replayed `node`, as lists it keeps from the recording (CHECKED_DEAD). torch replays a node
    (execute_node) only after its check_invariants passed, and the replay asks each of these
    with the wrapper's own expired(): a replay that returned found every one dead. From the
    root; the node's own outputs are never among them (the lists are made before it has any)."""
    path = path_to(node)[::-1]
    indices: dict[int, set[int]] = {}
    for name in CHECKED_DEAD:
        for depth, index in read(node, name, ()) or ():
            indices.setdefault(depth, set()).add(index)
    return [(path[depth], tuple(sorted(found))) for depth, found in sorted(indices.items())
            if 0 <= depth < len(path) - 1]


def output_metadata(node: Any) -> list:
    """Per output: a dict (size, stride, dtype, nbytes, data_ptr, …) for a tensor, else the int or
    None output itself (warmup nodes keep none)."""
    return list(getattr(node, "outputs_metadata", None) or [])


def outputs_live(node: Any) -> list[bool]:
    """Is each output of a node live, as torch's StorageWeakRefWrapper.expired() tells it (see
    `live_outputs`)."""
    live = set(live_outputs(node, FoundDead()))
    return [i in live for i in range(len(output_refs(node)))]


class FoundDead:
    """What reads of one node's outputs found expired: the outputs still open (not found
    expired) are the only ones read again, and nothing of the others is touched (a read of a
    replay loop is paid in cache misses on torch's objects more than in instructions, and a loop
    over every output in Python).

    An expired output has no users, and only its node's run gives it some again: torch points an
    output's wrapper at another storage (`swap_weakref`) or makes a new wrapper only while the node
    runs (`reconstruct_outputs`), where `node_ran` opens every output again; 2.14+'s generation
    cloning points wrappers at placeholder storages no one holds, which read expired. `node` tells
    a node apart from a later one at the same id(); `tracked` keeps what `tracked_outputs` found of
    it, `torch_checks` what torch finds dead before each of its replays, `storages` its cached
    outputs' storages (CachedStorages)."""

    __slots__ = ("node", "count", "open", "tracked", "torch_checks", "storages")

    def __init__(self, node: Any = None) -> None:
        self.node = None if node is None else weakref.ref(node)
        self.count = -1  # how many outputs `open` is of
        self.open: list[int] = []  # indices of the outputs not found expired (all when count is -1)
        self.tracked: Optional[tuple[int, tuple[int, ...]]] = None  # (how many outputs, the tracked ones)
        # (weakref to an ancestor, its number of outputs, the indices of those found dead, the others)
        self.torch_checks: Optional[list[tuple[Any, int, frozenset[int], tuple[int, ...]]]] = None
        self.storages: Optional[CachedStorages] = None

    def node_ran(self) -> None:
        """Its node ran: every output may be live again."""
        self.count = -1

    def still_open(self, count: int) -> Any:
        """The indices of the node's `count` outputs to read."""
        return self.open if self.count == count else range(count)

    def found_expired(self, count: int, indices: frozenset[int], rest: tuple[int, ...]) -> None:
        """These of the node's `count` outputs were found expired (by torch itself); `rest`: the
        others, all open again where the node ran since the last read."""
        self.open = list(rest) if self.count != count else [i for i in self.open if i not in indices]
        self.count = count

    def of(self, node: Any) -> bool:
        """Is this what was found of `node` (not of a node torch freed, whose id() it now has)?"""
        return self.node is not None and self.node() is node


class CachedStorages:
    """The storages of a node's cached outputs, as the ints torch's use count takes, read once
    from torch's wrappers and kept while the node keeps the same cached tensors: a replay loop's
    read of a cached output then touches its tensor and its storage, not the wrapper, its weak
    reference and the int they hold (each a cache miss after torch's own work).

    torch points a cached output's wrapper at its storage when it makes the cached tensor, and
    not again while that tensor is cached (2.11 - 2.15): a node's run makes its cached tensors
    anew, with new wrappers, only after all of them were taken out of the list (a checkpoint, a
    shutdown), and 2.14+'s generation cloning swaps an output's storage only as it puts None in
    that output's place in the list. So while the list holds the same first cached tensor (a weak
    reference tells, and holds nothing) and an output's place is not None, the int kept is
    torch's wrapper's own, which keeps it valid."""

    __slots__ = ("at", "first", "cdata")

    def __init__(self, cached: Any) -> None:
        self.at = next((i for i, tensor in enumerate(cached) if tensor is not None), -1)
        self.first = None if self.at < 0 else weakref.ref(cached[self.at])
        self.cdata: list[Optional[int]] = [None] * len(cached)  # each read at its output's first need

    def storage(self, refs: Any, i: int) -> int:
        """Output i's storage, read from its wrapper and kept: a copy of the int, so that a later
        read touches none of torch's objects (`live_outputs` reads the kept one itself)."""
        cdata = self.cdata[i] = refs[i].ref.cdata + 0
        return cdata

    def current(self, cached: Any) -> bool:
        """Does the node still keep the cached tensors these storages were read with?"""
        return len(cached) == len(self.cdata) and self.first is not None and self.first() is cached[self.at]


def live_outputs(node: Any, dead: FoundDead) -> list[int]:
    """The indices of a node's live outputs, as torch's StorageWeakRefWrapper.expired() tells
    it, read without calling it (it takes five Python calls per output, and 2.15's may detach
    a tensor); only the outputs `dead` holds open are read, and it keeps the live ones open.

    expired() is true when the storage's use count is at its baseline (0, or 2 for an output torch
    caches: the cache's storage object and tensor) and, for a cached output, check_refcount says
    that only the cache holds its tensor (expired() is the same in every release 2.11 - 2.15;
    check_refcount is not). That check is read here as each release makes it
    (CPP_HELD_CACHED_OUTPUT_LIVE). torch gives an output a cached tensor and the wrapper its extra
    check together, and takes both away together, so a cached tensor says which check applies
    without reading the wrapper; an extra check with no cached tensor to read is asked expired()
    itself. This runs at every decision of a replay loop traced at "full": no call per output
    beyond torch's counts, a cached output that Python holds more than once is read no further
    than its tensor's reference count, and one held less is read at the storage kept for it
    (CachedStorages), not through its wrapper."""
    refs = read(node, "outputs_weakrefs", None) or ()
    count = len(refs)
    cached = getattr(node, "cached_tensor_outputs", None) or ()
    n_cached = len(cached)
    use_count, refcount, cpp_held_live = getattr(torch._C, STORAGE_USE_COUNT), sys.getrefcount, CPP_HELD_CACHED_OUTPUT_LIVE
    storages = dead.storages
    if n_cached and (storages is None or not storages.current(cached)):
        storages = dead.storages = CachedStorages(cached)
    kept = storages.cdata if n_cached else ()
    live = []
    for i in dead.still_open(count):
        if i < n_cached and cached[i] is not None:
            # expired() is check_refcount and the storage's count at 2; the check first, as it
            # decides most live outputs alone. check_refcount: the cache's list entry and
            # getrefcount's argument make 2 (no local may hold the tensor while it counts)
            held = refcount(cached[i])
            if held > 3:
                live.append(i)
                continue
            if cpp_held_live:  # 2.15: a tensor C++ also holds is live
                expired = held == 2 and cached[i]._use_count() <= 1
            else:  # through 2.14: held once more than the cache is expired only where that is C++
                # (a tensor C++ holds is held 3 times, as check_refcount asserts: at 2 it is not asked)
                expired = held == 2 or cached[i]._use_count() > 1
            if expired:  # the storage kept (an address: never 0), else read from the wrapper now
                expired = use_count(kept[i] or storages.storage(refs, i)) == 2
        else:
            ref = refs[i]
            if ref is None:
                expired = True  # nothing torch tracks: never live until the node runs again
            elif ref.extra_ref_check is None:
                expired = use_count(ref.ref.cdata) == 0
            else:
                expired = ref.expired()
        if not expired:
            live.append(i)
    dead.open, dead.count = live, count
    return live


def torch_node_id(node: Any) -> str:
    """How torch itself names the node, for its signature (see torch_id_words)."""
    return torch_id_words(is_warmup(node), getattr(getattr(node, "id", None), "id", None))


def is_warmup(node: Any) -> bool:
    return type(node).__name__ == WARMUP_NODE_CLASS


def manager_index(manager: Any) -> Optional[int]:
    """The index of a tree manager's device (torch keeps a manager per device and thread)."""
    return read(manager, "device_index")


def manager_device(manager: Any) -> Optional[str]:
    """The device of a tree manager: 'cuda:1'."""
    return device_name(manager_index(manager))


def node_device(node: Any) -> Optional[str]:
    """The device of a node: a warmup node keeps its index as `device_index`, a graph node as `device`."""
    return device_name(read(node, "device_index" if is_warmup(node) else "device"))


def pool_of(manager: Any) -> Any:
    return read(manager, "cuda_graphs_thread_pool")


_TREES: Any = None


def _trees_module() -> Any:
    global _TREES
    _TREES = sys.modules.get(TREES_MODULE)
    return _TREES


def starts_new_generation(manager: Any) -> bool:
    """Would torch's manager begin a new generation now (its can_start_new_generation())?

    Read straight from the generation counters, as torch computes it (the same from 2.4 through
    2.15): this runs
    at every path end of an observed loop, where torch's own four method calls would be
    most of the observer's cost. A layout without those counters asks torch instead.
    """
    trees = _TREES or _trees_module()
    try:
        counter = trees.MarkStepBox.mark_step_counter
        generation = counter if counter != 0 else trees.GenerationTracker.generation
        if manager.current_gen == generation:
            return False
        return counter != 0 or not manager.running_forwards_with_pending_backwards
    except AttributeError:
        pass
    check = getattr(manager, "can_start_new_generation", None)
    if check is None:
        read(manager, "can_start_new_generation")  # says once that this torch lacks it
        return False
    try:
        return bool(check())
    except Exception:
        return False


def replay_mismatches(manager: Any, parent: Any, new_inputs: list, function_id: Any) -> list[tuple[Any, str, str]]:
    """Why each recorded graph of this function under `parent` (a root when None) can't replay:
    (node, torch's CheckInvariantStatus name, its words).

    Asks the nodes' check_invariants again, on a copy of the inputs (a passing check clears
    the managed inputs it is given), when torch is about to record: off the replay path.
    """
    siblings = read(manager, "roots", {}) if parent is None else getattr(parent, "children", None)
    found = []
    for child in (siblings or {}).get(function_id, ()):
        try:
            result = child.check_invariants(list(new_inputs))
        except Exception:
            continue
        status, describe = result if isinstance(result, tuple) else (result, None)
        why = getattr(status, "name", "SUCCESS")
        if why == "SUCCESS":
            continue
        if callable(describe):
            with contextlib.suppress(Exception):
                why = describe() or why
        found.append((child, getattr(status, "name", ""), why))
    return found


def generation_check() -> Callable[[Any], bool]:
    """A fast `starts_new_generation(manager)` for hooks that run on every call of an observed
    loop: it reads the generation counters inline where this torch has them."""
    trees = _TREES or _trees_module()
    box, tracker = getattr(trees, "MarkStepBox", None), getattr(trees, "GenerationTracker", None)
    if not (hasattr(box, "mark_step_counter") and hasattr(tracker, "generation")):
        return starts_new_generation

    def new_generation(manager: Any) -> bool:
        counter = box.mark_step_counter
        try:
            return manager.current_gen != (counter or tracker.generation) and (
                counter != 0 or not manager.running_forwards_with_pending_backwards)
        except AttributeError:
            return starts_new_generation(manager)

    return new_generation


def tree_capture(frame: Any) -> Optional[tuple[str, Any]]:
    """Is the CUDA graph being captured from this stack one of torch.compile's trees'? ("node",
    the CUDAGraphNode recording it) or ("pool", the manager whose pool it keeps alive); None
    for a graph of the user's own. Walks the live frames only, holding none of them."""
    trees_file = getattr(sys.modules.get(TREES_MODULE), "__file__", None)
    if trees_file is None:
        return None
    return frames.owner_in_stack(frame, trees_file, {NODE_RECORD: "node", MANAGER_INIT: "pool"})


def tree_replay(frame: Any) -> Any:
    """The CUDAGraphNode of torch.compile's trees replaying its graph from this stack, or None
    (a graph of the user's own). Walks the live frames only, holding none of them."""
    trees_file = getattr(sys.modules.get(TREES_MODULE), "__file__", None)
    found = trees_file and frames.owner_in_stack(frame, trees_file, {NODE_REPLAY: "node"})
    return found[1] if found else None
