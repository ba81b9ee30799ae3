"""Reading torch's tree manager: the one module that knows its private attributes.

Private attributes of `torch._inductor.cudagraph_trees` move between torch releases. Every
read goes through `read()` (`cgviz.observe.lookups`), which on a missing attribute says which
one, once, and returns a default, so an observed program keeps running on a torch whose layout
is new to cgviz. The helpers that name nothing of torch's live in sibling modules (releases,
lookups, torch_words, frames); the names they look for are passed from here.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Optional

import torch

from cgviz._torch import rules
from cgviz.observe import frames
from cgviz.observe.lookups import imported, lookup, read
from cgviz.observe.releases import in_span, release
from cgviz.observe.torch_words import device_name, torch_id_words

# The installed torch's release: what its tree manager decides differs by release (see SINCE).
RELEASE = release(str(torch.__version__))
RELEASE_NAME = f"{RELEASE[0]}.{RELEASE[1]}"

# -- every private name of torch that cgviz.observe relies on ------------------------------------
# tests/test_torch_layout.py checks each one against the installed torch. An entry that is a
# tuple of names lists alternatives (one of them is enough; the first one present is used).
TREES_MODULE = "torch._inductor.cudagraph_trees"
MANAGER_CLASS = "CUDAGraphTreeManager"
# The manager's method that every call of a compiled function goes through, looked up at call
# time (torch 2.2+; older torch has only run()).
RUN_METHODS = ("_run", "run")
# The manager's methods that the observer wraps, by the role the wrapper plays.
HOOKED_METHODS = {
    "warmup": "run_eager",
    "record": "record_function",
    "execute": "execute_node",
    "checkpoint": "apply_checkpoint_execution_state_in_allocator",
    "path_clear": "clear_current_path_state_and_set_to_none",
    "end_warmup": "try_end_curr_warmup",
    "dealloc": "dealloc_current_path_weakrefs",
    "warn": "check_warn_on_unable_to_start_executing",
    "add": "add_function",
    "shutdown": "shutdown",
    # torch 2.14+ (see SINCE): outputs cloned out of the pool at a generation, another warmup asked for
    "clone": "_clone_live_user_visible_storages",
    "warmup_incomplete": "mark_warmup_incomplete",
    # torch 2.15+: inputs that are outputs of the path and keep moving are copied, or the edge skipped
    "managed_input_limit": "_update_cudagraph_managed_input_rerecord",
}
# Members of the module's classes that are read or called (instance attributes included).
CLASS_MEMBERS: dict[str, tuple] = {
    MANAGER_CLASS: (
        RUN_METHODS, *HOOKED_METHODS.values(), "get_func_name", "can_start_new_generation",
        "current_node", "current_gen", "running_forwards_with_pending_backwards", "in_recording",
        "roots", "path_state", "id_to_mode", "id_to_compile_id", "warned_functions",
        "cuda_graphs_thread_pool", "device_index", "ids_to_stack_traces",
        ("skip_cudagraph", "non_cudagraph_managed_mutation_hint"), "exceed_rerecord_limit", "_get_node_id",
        "ids_to_funcs", "active_warmup_function", "demoted_cudagraph_managed_idxs", "cudagraph_managed_input_rerecord",
    ),
    "CUDAGraphNode": ("id", "graph", "wrapped_function", "parent", "children", "outputs_weakrefs", "outputs_metadata",
                      "check_invariants", "device", "_record"),
    "CheckInvariantStatus": ("StaticInputIdxMismatch", "CudagraphManagedIdxMismatch",
                             "ExpectedDeadIndicesBeforeGraphMismatch"),
    "CUDAWarmupNode": ("id", "wrapped_function", "parent", "outputs_weakrefs", "already_warm", "device_index"),
    "StorageWeakRefWrapper": ("expired",),
    "GraphID": ("id",),
    "FunctionID": ("id",),
    "WrappedFunction": ("id", "kernel_free_cudagraph", "cudagraph_managed_input_rerecord_limit",
                        "cudagraph_managed_input_rerecord_action"),
    "MarkStepBox": ("mark_step_counter",),
    "GenerationTracker": ("generation",),
}
WARMUP_NODE_CLASS = "CUDAWarmupNode"
# The config options cgviz reads or names in its reasons (torch._inductor.config).
CONFIG_OPTIONS = (
    "triton.cudagraph_unexpected_rerecord_limit", "triton.cudagraph_trees_generation_cloning",
    "triton.cudagraph_managed_input_rerecord_limit", "triton.cudagraph_managed_input_rerecord_action",
    "triton.cudagraph_dynamic_shape_rerecord_limit", "triton.cudagraph_skip_dynamic_graphs",
)
# Names that only some releases have: the first release that has each ("Class.member",
# "config.option", "module.function"). Every other name above is in every release cgviz supports
# (2.11 to 2.15); tests/test_torch_surface.py checks both against each release's sources.
SINCE: dict[str, str] = {
    "CUDAGraphTreeManager._clone_live_user_visible_storages": "2.14",
    "CUDAGraphTreeManager.mark_warmup_incomplete": "2.14",
    "CUDAGraphTreeManager.active_warmup_function": "2.14",
    "WrappedFunction.kernel_free_cudagraph": "2.14",
    "triton.cudagraph_trees_generation_cloning": "2.14",
    "CUDAGraphTreeManager._update_cudagraph_managed_input_rerecord": "2.15",
    "CUDAGraphTreeManager.demoted_cudagraph_managed_idxs": "2.15",
    "CUDAGraphTreeManager.cudagraph_managed_input_rerecord": "2.15",
    "CUDAGraphTreeManager.skip_cudagraph": "2.15",
    "WrappedFunction.cudagraph_managed_input_rerecord_limit": "2.15",
    "WrappedFunction.cudagraph_managed_input_rerecord_action": "2.15",
    "triton.cudagraph_managed_input_rerecord_limit": "2.15",
    "triton.cudagraph_managed_input_rerecord_action": "2.15",
    "triton.cudagraph_dynamic_shape_rerecord_limit": "2.15",
    "graphs.register_graph_instantiate_hook": "2.14",
}
# ... and names the releases from 2.15 on no longer have (the last release that had each)
UNTIL: dict[str, str] = {
    "CUDAGraphTreeManager.non_cudagraph_managed_mutation_hint": "2.14",
}


def has_since(key: str) -> bool:
    """Does the installed torch have this name of SINCE / UNTIL (by release)?"""
    return in_span(RELEASE, SINCE.get(key), UNTIL.get(key))
# Compile-time "skipping cudagraphs due to ..." goes through this function; it is wrapped in
# each of these modules that has it (they import it by name).
SKIP_LOGGER = "log_cudagraph_skip_and_bump_counter"
SKIP_LOGGER_MODULES = (
    "torch._inductor.cudagraph_utils", "torch._inductor.cudagraph_trees",
    "torch._inductor.output_code", "torch._inductor.compile_fx",
)
# A graph whose CUDA graphs torch skipped at compile time never reaches the tree manager: its
# compiled graph (OUTPUT_CODE_MODULE.COMPILED_GRAPH_CLASS) calls `current_callable` on every
# call. Its `post_compile` is where torch decides (the `cudagraphs` box of its graph_kwargs is
# turned off); the observer wraps that graph's `current_callable` to see its calls.
OUTPUT_CODE_MODULE = "torch._inductor.output_code"
COMPILED_GRAPH_CLASS = "CompiledFxGraph"
COMPILED_GRAPH_MEMBERS = ("post_compile", "current_callable", "fx_kwargs")
# torch's count of its CUDA graph skips, and the compile id of the compilation under way.
SKIP_COUNTER = ("torch._dynamo.utils", "counters", "inductor", "cudagraph_skips")
COMPILE_CONTEXT = ("torch._guards", "CompileContext", "current_compile_id")


# dynamo says where and why it broke a graph through this method of its bytecode translator
# (translator, code_options, reason, exc); the user's stack is the exception's real_stack, or the
# tracing context's while it runs.
GRAPH_BREAK = ("torch._dynamo.symbolic_convert", "InstructionTranslatorBase", "log_graph_break")
TRACING_CONTEXT = ("torch._guards", "TracingContext", "extract_stack")


# dynamo compiles a Python frame through this callable (frame, cache_entry, hooks, frame_state):
# the frame names the function every graph of that compilation comes from.
CONVERT_FRAME = ("torch._dynamo.convert_frame", "ConvertFrameAssert", "__call__")


def convert_frame_class() -> Any:
    """dynamo's frame converter class (importing its module), or None."""
    return imported(*CONVERT_FRAME[:2])


# a compiled module's frame: dynamo compiles its call (one code for every module, a compile id each),
# in torch 2.11+ through an extra frame (external_utils.wrap_inline's `inner`, holding `fn`)
_MODULE_CALLS = ("_call_impl", "_wrapped_call_impl", "__call__")
_WRAPPED_FRAME = ("inner", "external_utils.py")


def frame_function_name(frame: Any) -> str:
    """The function a frame dynamo compiles runs: "Net.forward" for a method or a compiled
    module's call, else its name."""
    return frames.function_name(frame, _WRAPPED_FRAME, _MODULE_CALLS)


# inductor's scheduler hands each compiled graph's partitions to this method (partitions,
# signatures: signature.skip_cudagraph marks the ones kept out of CUDA graphs; should_partition(node)
# says why for each of their nodes).
PARTITIONS = ("torch._inductor.scheduler", "Scheduler", "_log_graph_partitions")


def scheduler_class() -> Any:
    """inductor's Scheduler class (importing its module), or None."""
    return imported(*PARTITIONS[:2])


def partition_cuts(scheduler: Any, args: tuple, kwargs: dict) -> Optional[tuple[int, list[tuple[str, str, str]]]]:
    """(how many partitions will be CUDA graphs, [(torch's reason, the op, its stack trace)] for
    the ops kept out of them), or None where the arguments cannot be read."""
    try:
        from torch._inductor.virtualized import V

        if "cuda" not in V.graph.device_types:  # a graph without GPU work: partitions do not matter (as torch)
            return None
        partitions = kwargs["partitions"] if "partitions" in kwargs else args[0]
        signatures = kwargs["signatures"] if "signatures" in kwargs else args[1]
        graphed = sum(1 for sig in signatures if not sig.skip_cudagraph)
        cuts = []
        for partition, sig in zip(partitions, signatures):
            if not sig.skip_cudagraph:
                continue
            for node in partition:
                reason = scheduler.should_partition(node)
                if not reason:
                    continue
                origin = node.node.get_origin_node() if getattr(node, "node", None) is not None else None
                target = str(getattr(origin, "target", "")) if origin is not None else ""
                stack = (origin.meta.get("stack_trace") or "") if origin is not None else ""
                cuts.append((str(reason), target, stack))
        return graphed, cuts
    except Exception:  # another release's partitions: not read
        return None


INDUCTOR_CACHE_DIR = ("torch._inductor.runtime.cache_dir_utils", "cache_dir")


def inductor_cache_dir() -> Optional[str]:
    """Where inductor writes the code it generates (TORCHINDUCTOR_CACHE_DIR, or its default), or None."""
    cache_dir = imported(*INDUCTOR_CACHE_DIR)
    try:
        return str(cache_dir()) if cache_dir is not None else None
    except Exception:
        return None


def graph_break_class() -> Any:
    """dynamo's translator class that logs graph breaks (importing its module), or None."""
    return imported(*GRAPH_BREAK[:2])


def graph_break_site(translator: Any, args: tuple, kwargs: dict) -> Optional[tuple[str, str, tuple]]:
    """(the compiled function's name, dynamo's reason, (file, line, function, code) of the user's
    line that broke the graph) from a log_graph_break call, or None where it cannot be read."""
    try:
        reason = kwargs["reason"] if "reason" in kwargs else args[1]
        exc = kwargs["exc"] if "exc" in kwargs else (args[2] if len(args) > 2 else None)
        stack = getattr(exc, "real_stack", None)
        if not stack:
            extract = lookup(*TRACING_CONTEXT)
            stack = extract() if extract is not None else None
        frame = stack[-1] if stack else None
        site = (frame.filename, frame.lineno, frame.name, frame.line or "") if frame is not None else None
        code = getattr(translator, "f_code", None)
        return getattr(code, "co_name", ""), str(reason), site
    except Exception:  # another release's arguments: the break is not named
        return None


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


EAGER_MUTATION = "mutation"
EAGER_RERECORD_LIMIT = "rerecord_limit"
EAGER_MANAGED_INPUT_LIMIT = "managed_input_limit"
STATIC_INPUT_MISMATCH = "StaticInputIdxMismatch"


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


# torch's CheckInvariantStatus names -> the kinds of failed check the release rules count by
_MISMATCH_KINDS = {STATIC_INPUT_MISMATCH: rules.STATIC, "CudagraphManagedIdxMismatch": rules.MANAGED,
                   "ExpectedDeadIndicesBeforeGraphMismatch": rules.DEAD}


def rerecord_counts(status: str) -> Optional[bool]:
    """Does a re-record after a failed check of `status` (a CheckInvariantStatus name) count
    toward torch's re-record limit in the installed release? None: this release has no limit.
    The release's rules are the engine's (`cgviz._torch.rules`: one table for both producers)."""
    release = rules.rules_for(f"{RELEASE[0]}.{RELEASE[1]}")
    if release.rerecord_limit_applies == rules.NEVER:
        return None
    kind = _MISMATCH_KINDS.get(status)
    return kind is not None and release.counts(kind)


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


def rerecord_limit() -> Any:
    """torch's re-record limit (torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit)."""
    return _config_value("triton.cudagraph_unexpected_rerecord_limit")


def skip_count() -> int:
    """How many times torch has skipped CUDA graphs in this process (0 where it keeps no count)."""
    import torch._dynamo.utils  # noqa: F401

    value = lookup(*SKIP_COUNTER)
    return value if isinstance(value, int) else 0


def current_compile_id() -> str:
    """The compile id of the compilation under way ("0/0"), or ''."""
    current = lookup(*COMPILE_CONTEXT)
    try:
        value = current() if current is not None else None
    except Exception:
        value = None
    return "" if value is None else str(value)


def compiled_graph_class() -> Any:
    """torch's compiled graph class (importing its module), or None with a one-time warning."""
    import importlib

    module = importlib.import_module(OUTPUT_CODE_MODULE)
    return read(module, COMPILED_GRAPH_CLASS)


def graph_mode(graph: Any) -> str:
    """A compiled graph's mode in torch's words: 'forward', 'backward' or 'inference'."""
    kwargs = getattr(graph, COMPILED_GRAPH_MEMBERS[2], None) or {}
    if kwargs.get("is_backward"):
        return "backward"
    return "inference" if kwargs.get("is_inference") else "forward"


def _cudagraphs_box(args: tuple, kwargs: dict) -> Any:
    """The `cudagraphs` box of a compiled graph's post_compile(example_inputs, constants,
    graph_kwargs) call (older torch: post_compile(example_inputs, cudagraphs, constants)), or None."""
    graph_kwargs = kwargs.get("graph_kwargs", args[-1] if args else None)
    box = graph_kwargs.get("cudagraphs") if isinstance(graph_kwargs, dict) else kwargs.get("cudagraphs")
    if box is None:
        box = next((a for a in args if type(a).__name__ == "BoxedBool"), None)
    return box


def cudagraphs_turned_off(args: tuple, kwargs: dict) -> bool:
    """After a compiled graph's post_compile: did torch turn its `cudagraphs` box off (the graph
    runs without CUDA graphs)?"""
    box = _cudagraphs_box(args, kwargs)
    return box is not None and not box


def cudagraphs_asked(args: tuple, kwargs: dict) -> bool:
    """Before a compiled graph's post_compile: is its `cudagraphs` box on (CUDA graphs asked for)?"""
    return bool(_cudagraphs_box(args, kwargs))


# With graph partitioning (torch's default since 2.9), post_compile turns CUDA graphs off without
# a message where the graph has no partition to record, or its cudagraph_info lists reasons.
PARTITION_MAPS = "partition_maps"
CUDAGRAPH_INFO = ("cudagraph_info", "cudagraph_fail_reasons")


def silent_skip(graph: Any) -> Optional[str]:
    """Why torch turned a CUDA graph compiled graph's CUDA graphs off without saying so, in
    cgviz's words (None where it is not one of the known silent cases, or not a CUDA graph)."""
    if "cuda" not in (getattr(graph, "device_types", None) or ()):
        return None
    reasons = getattr(getattr(graph, CUDAGRAPH_INFO[0], None), CUDAGRAPH_INFO[1], None)
    if reasons:
        return "; ".join(map(str, reasons))
    maps = getattr(graph, PARTITION_MAPS, None)
    if maps is not None and len(maps) == 0:
        why = ("graph partitioning left no part of the graph to record as a CUDA graph: every kernel of it was "
               "cut out of the CUDA graphs")
        if _config_value("triton.cudagraph_skip_dynamic_graphs"):
            why += (" (torch._inductor.config.triton.cudagraph_skip_dynamic_graphs = True cuts out every kernel that "
                    "uses a dynamic size)")
        return why
    return None


def graph_stacks(graph: Any) -> list[str]:
    """The stack traces torch keeps for a compiled graph's outputs (where the user's code made
    them), for naming the graph."""
    stacks = getattr(getattr(graph, CUDAGRAPH_INFO[0], None), "stack_traces", None) or []
    return [text for text in stacks if isinstance(text, str) and text]


def _config_value(name: str) -> Any:
    """An inductor config option ("triton.cudagraph_skip_dynamic_graphs"), or None."""
    return lookup("torch._inductor.config", *name.split("."))


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
    """Has this warmup node's path warmed up before (the function runs eagerly again)?"""
    return bool(getattr(node, "already_warm", False))


def roots(manager: Any) -> list:
    by_function = read(manager, "roots", {}) or {}
    return [n for nodes in by_function.values() for n in nodes]


def output_refs(node: Any) -> list:
    return list(read(node, "outputs_weakrefs", []) or [])


def output_metadata(node: Any) -> list:
    """Per output: a dict with size/dtype/nbytes/data_ptr, or None (warmup nodes keep none)."""
    return list(getattr(node, "outputs_metadata", None) or [])


def is_live(ref: Any) -> bool:
    """An output's StorageWeakRefWrapper: live unless expired (what calling it checks first)."""
    return ref is not None and not ref.expired()


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

    Read straight from the generation counters, as torch 2.4 to 2.13 compute it: this runs
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


# torch 2.15 says through this logger (torch._logging.warning_once) that a compiled graph hit
# cudagraph_dynamic_shape_rerecord_limit; its new shapes never reach the tree manager.
TREES_LOGGER = TREES_MODULE
DYNAMIC_SHAPE_LIMIT = "cudagraph_dynamic_shape_rerecord_limit"


# -- CUDA graphs made by the trees themselves, seen by cgviz.observe_graphs ------------------------
# A node captures its graph in CUDAGraphNode._record; the manager captures an empty graph when it
# is made (CUDAGraphTreeManager.__init__) to keep its pool alive.
NODE_RECORD = ("CUDAGraphNode", "_record")
MANAGER_INIT = (MANAGER_CLASS, "__init__")


def tree_capture(frame: Any) -> Optional[tuple[str, Any]]:
    """Is the CUDA graph being captured from this stack one of torch.compile's trees'? ("node",
    the CUDAGraphNode recording it) or ("pool", the manager whose pool it keeps alive); None
    for a graph of the user's own. Walks the live frames only, holding none of them."""
    trees_file = getattr(sys.modules.get(TREES_MODULE), "__file__", None)
    if trees_file is None:
        return None
    return frames.owner_in_stack(frame, trees_file, {NODE_RECORD: "node", MANAGER_INIT: "pool"})
