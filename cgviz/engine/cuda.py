"""Real CUDA graphs in one private memory pool per tree.

Warmup runs with the current thread's allocations routed to the pool; record captures
with torch.cuda.CUDAGraph into the same pool on the tree's capture stream and replays
once (capture runs no kernels). Replay copies non-static inputs into the recorded
buffers, replays, and hands out tensors on the static output memory: built at a graph's
first replay and handed out again while nothing else holds them (CachedOutput), so the
replay path builds no tensors, as torch's own tree keeps its cached outputs.
Private torch functions come from _torch_compat; the pool's segments and a graph's kernels, read
through public torch API, from cgviz/_torch.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import warnings
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from cgviz._torch.allocator import PoolReading, RawSegment
from cgviz._torch.graphs import graph_dot, inspectable_graph
from cgviz._torch.kernels import kernel_counts
from cgviz.engine import _torch_compat as compat
from cgviz.engine.backend import NOT_NOW, CaptureUnsupported, LeafInfo, RunResult, describe_exception
from cgviz.engine.inputs import collapse, expanded_dims, input_buffer
from cgviz.engine.profile import CudaTimer
from cgviz.engine.watch import RunWatcher, prepare, rebase

_REQUIRED = (
    "begin_allocate_to_pool",
    "end_allocate_to_pool",
    "release_pool",
    "get_checkpoint_state",
    "set_checkpoint_pool_state",
    "raw_delete",
    "construct_storage_from_data_pointer",
    "set_storage_access_error_msg",
    "free_and_remove_deleter",
    "has_standard_deleter",
    "clear_cublas_workspaces",
)


def _invalidate(cdata: int, tensors: Sequence[Any], message: str) -> None:
    """Make a storage's memory raise on access (and free it if the allocator owns it)."""
    # memory the allocator handed out (not a replay's view of graph memory) goes back now
    if compat.cuda_function("has_standard_deleter")(cdata):
        compat.cuda_function("free_and_remove_deleter")(cdata)
    mark = compat.cuda_function("set_storage_access_error_msg")
    if compat.STORAGE_ERROR_TAKES_STORAGE:
        mark(cdata, message)
        return
    for t in tensors:  # older torch marks a storage through one of its tensors
        mark(t, message)


class CudaRef:
    """Liveness of one output storage of a warmup or a recording (allocator memory).

    Holds a weak reference to the storage, as StorageWeakRef does, without its wrapper.
    """

    __slots__ = ("cdata", "tensors", "invalidated", "cloned")

    def __init__(self, storage: torch.UntypedStorage, tensors) -> None:
        self.cdata = compat.storage_weak_ref(storage)
        self.tensors = None if compat.STORAGE_ERROR_TAKES_STORAGE else [weakref.ref(t) for t in tensors]
        self.invalidated = False
        self.cloned = False  # copied out of the pool at a new generation: no longer the tree's

    def __del__(self) -> None:
        compat.free_weak_ref(self.cdata)

    def alive(self) -> bool:
        return not self.cloned and not compat.weak_ref_expired(self.cdata)

    def invalidate(self, message: str) -> None:
        if self.alive() and not self.invalidated:  # once: a marked storage raises on every access
            self.invalidated = True
            tensors = [] if self.tensors is None else [t for t in (ref() for ref in self.tensors) if t is not None]
            _invalidate(self.cdata, tensors, message)


def _loop_refcount() -> int:
    """sys.getrefcount of a list item inside `for t in items:` when nothing else holds it."""
    for t in [object()]:
        return sys.getrefcount(t)
    raise AssertionError


_UNHELD = _loop_refcount()


class CachedOutput:
    """One output storage of a replayed graph and the tensors handed out on it.

    They are kept for the graph's next replay, which hands out the same tensors instead of
    building a storage, tensors and a weak reference again (torch's trees keep
    cached_tensor_outputs for the same reason). A replay only happens once the previous
    outputs are dead or invalidated, so the tensors are free to reuse then. The output is
    live while anything beyond this cache holds the tensors, a view of them or their
    storage: reference counts above those taken when the cache was made, with nothing else
    holding them. The storage's Python object is kept too: torch hands that one object to
    whoever asks a tensor for its storage, so a user holding it shows in its reference count,
    and the replay loop's liveness test need not ask a tensor for it.
    """

    __slots__ = ("cdata", "tensors", "storage", "unheld", "invalidated", "cloned", "__weakref__")

    def __init__(self, tensors: list) -> None:
        self.tensors: Optional[list] = tensors
        self.invalidated = False
        self.cloned = False  # copied out of the pool at a new generation: no longer the tree's
        self.storage: Optional[torch.UntypedStorage] = tensors[0].untyped_storage()
        self.cdata = compat.storage_weak_ref(self.storage)
        # (tensors and storage objects on the storage, references to its Python object)
        self.unheld = (compat.storage_use_count(self.cdata), sys.getrefcount(self.storage))

    def __del__(self) -> None:
        compat.free_weak_ref(self.cdata)

    def alive(self) -> bool:
        tensors = self.tensors
        if tensors is None:  # dropped (and so also when cloned)
            return not self.cloned and not compat.weak_ref_expired(self.cdata)
        for t in tensors:
            if sys.getrefcount(t) > _UNHELD:
                return True
        uses, refs = self.unheld
        return sys.getrefcount(self.storage) > refs or compat.storage_use_count(self.cdata) > uses

    def drop(self) -> None:
        """Stop caching: the next replay builds new tensors; liveness falls back to the weak ref."""
        self.tensors = self.storage = None

    def invalidate(self, message: str) -> None:
        if self.alive() and not self.invalidated:  # once: a marked storage raises on every access
            self.invalidated = True
            tensors = self.tensors or []
            self.drop()  # the user's references keep the storage; the next replay makes new tensors
            _invalidate(self.cdata, tensors, message)


@dataclass
class _Leaf:
    kind: str  # "pool" | "input" | "external" | "constant"
    group: int = -1
    index: int = -1  # input index for "input"
    member: int = 0  # position among the tensors of its group ("pool")
    meta: Optional[dict] = None  # size, stride, dtype, storage_offset: to rebuild the tensor
    value: Any = None  # the tensor for "external", the value for "constant"


@dataclass
class CudaGraph:
    graph: torch.cuda.CUDAGraph
    buffers: dict[int, torch.Tensor]
    groups: list[tuple[int, int]]  # (data_ptr, nbytes) of each static output storage
    leaves: list[_Leaf]
    spec: Any
    copy_dst: list[torch.Tensor] = field(default_factory=list)
    copy_dims: list[tuple[int, ...]] = field(default_factory=list)  # expanded dims per copied input
    expanded: bool = False  # some copied input is expanded: copies go through collapse()
    single: bool = False  # the function returns one tensor: no pytree on the replay path
    cached: list = field(default_factory=list)  # per group: its CachedOutput (or None) once replayed
    cached_refs: list = field(default_factory=list)  # [cached[0]] for single graphs


class CudaBackend:
    """The Backend protocol on one CUDA device."""

    name = "cuda"

    def __init__(self, device: torch.device) -> None:
        prepare()
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ValueError(f"cuda:{index} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)")
        self.device = torch.device("cuda", index)
        self.index = index
        for need in _REQUIRED:
            compat.cuda_function(need)  # fail now, naming the torch version, not mid-run
        self._make_storage = compat.cuda_function("construct_storage_from_data_pointer")
        self._build = compat.tensor_builder(self.device)
        self._caches: "weakref.WeakSet[CachedOutput]" = weakref.WeakSet()
        self.capture_disabled: Optional[str] = None  # why no capture can begin in the pool any more
        self.read_kernels = False  # set by the tree: keep each graph's nodes (kernels) when recording
        with torch.cuda.device(self.device):
            self.pool = torch.cuda.graph_pool_handle()
            self.stream = torch.cuda.Stream(self.device)
            # an empty capture creates the private pool and keeps it alive as long as the tree
            self._keepalive = torch.cuda.CUDAGraph()
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="The CUDA Graph is empty")
                with torch.cuda.graph(self._keepalive, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"):
                    pass
        self._pool_reading = PoolReading(self.index, self.pool)

    def timer(self) -> CudaTimer:
        return CudaTimer(self.device)

    def describe(self) -> dict:
        return {
            "backend": "cuda",
            "device": f"{self.device} ({torch.cuda.get_device_name(self.device)})",
            "torch": str(torch.__version__),
            "cuda": torch.version.cuda,
        }

    def unsupported_input(self, t: torch.Tensor) -> Optional[str]:
        if not t.is_cuda or t.get_device() != self.index:
            if t.device.type == "cpu" and t.dim() == 0:
                return f"is a CPU scalar tensor; the tree is on {self.device} and a graph would bake in its value"
            return f"is on {t.device}, but the tree is on {self.device}"
        if t.layout != torch.strided:
            return f"has layout {t.layout}; graphs take strided tensors"
        return None

    def address(self, t: torch.Tensor) -> int:
        return t.data_ptr()

    # -- the pool --------------------------------------------------------------------------
    @contextlib.contextmanager
    def _in_pool(self) -> Iterator[None]:
        """Route this thread's allocations to the tree's pool, on the tree's stream, with cuBLAS's
        workspaces cleared before and after (see _cublas_workspaces_cleared)."""
        with _cublas_workspaces_cleared(), self._routed_to_pool():
            yield

    @contextlib.contextmanager
    def _routed_to_pool(self) -> Iterator[None]:
        torch.cuda.synchronize(self.device)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream), torch.device(self.device):
            compat.cuda_function("begin_allocate_to_pool")(self.index, self.pool)
            try:
                yield
            finally:
                compat.cuda_function("end_allocate_to_pool")(self.index, self.pool)
                compat.cuda_function("release_pool")(self.index, self.pool)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)

    def checkpoint(self) -> Any:
        return compat.cuda_function("get_checkpoint_state")(self.index, self.pool)

    def restore(self, state: Any, live: Sequence[tuple[int, Any]], dead_addresses: Sequence[int]) -> None:
        self._pool_reading.forget()  # the allocator's state is set wholesale: its counters need not move
        self.drop_cached_outputs()  # the storages of live outputs become owning; dead ones are freed
        live_storages = [ref.cdata for _, ref in live]
        compat.cuda_function("set_checkpoint_pool_state")(self.index, state, [], live_storages)
        for address in dict.fromkeys(dead_addresses):
            compat.cuda_function("raw_delete")(address)

    def segments(self) -> list[RawSegment]:
        """The pool's segments (read again only when the allocator's counters moved)."""
        return self._pool_reading.segments()

    # -- running ---------------------------------------------------------------------------
    def warmup(self, fn: Callable, args: Sequence[Any]) -> RunResult:
        watcher = RunWatcher(inputs=args)
        with self._in_pool(), watcher:
            out = fn(*args)
        leaves, spec = tree_flatten(out)
        infos, _ = self._describe(leaves, args, watcher.new_storages)
        return RunResult(out, infos, capture_blocker=watcher.capture_blocker(), mutated=frozenset(watcher.mutated))

    def record(self, fn: Callable, args: Sequence[Any], copy_inputs: Sequence[int]) -> RunResult:
        if self.capture_disabled is not None:
            raise CaptureUnsupported(self.capture_disabled)
        inputs = list(args)
        buffers: dict[int, torch.Tensor] = {}
        with self._in_pool():
            for i in copy_inputs:
                buffers[i] = inputs[i] = input_buffer(inputs[i], self.device)
        graph = inspectable_graph() if self.read_kernels else torch.cuda.CUDAGraph()
        # refused before CUDA sees it: a capture CUDA breaks leaves torch's allocators recording
        watcher = RunWatcher(refuse_host_sync=True)
        with _no_garbage_collection(), torch.cuda.device(self.device), _cublas_workspaces_cleared():
            out = self._capture(graph, fn, inputs, watcher)
        graph.replay()  # capture ran no kernels: compute the outputs once
        kernels = kernel_counts(graph_dot(graph)) if self.read_kernels else None
        leaves, spec = tree_flatten(out)
        infos, plan = self._describe(leaves, inputs, watcher.new_storages)
        groups = {}
        for leaf, (kind, index) in zip(leaves, plan):
            if kind == "pool" and index not in groups:
                st = leaf.untyped_storage()
                groups[index] = (st.data_ptr(), st.nbytes())
        cuda_graph = CudaGraph(graph, buffers, [groups[g] for g in sorted(groups)], [], spec)
        members: Counter = Counter()
        for k, (leaf, (kind, index)) in enumerate(zip(leaves, plan)):
            cuda_graph.leaves.append(_leaf_plan(leaf, kind, index))
            if kind == "pool":
                cuda_graph.leaves[-1].member = members[index]
                members[index] += 1
            if kind == "input":  # kept relative to the input, rebuilt on the caller's tensor
                cuda_graph.leaves[-1].meta["storage_offset"] -= inputs[index].storage_offset()
                if index in buffers:
                    leaves[k] = rebase(leaf, inputs[index], args[index])
        out = tree_unflatten(leaves, spec)
        input_buffers = {i: b.data_ptr() for i, b in buffers.items()}
        # As torch's trees do, the input buffers go back to the pool: only this graph writes
        # them, when it replays, and then nothing recorded after it is live.
        for i, buf in list(buffers.items()):
            st = self._make_storage(buf.data_ptr(), self.device, buf.untyped_storage().nbytes())
            buffers[i] = torch.empty(0, dtype=buf.dtype, device=self.device).set_(st, 0, buf.size(), buf.stride())
        cuda_graph.copy_dims = [expanded_dims(buffers[i]) for i in copy_inputs]
        cuda_graph.expanded = any(cuda_graph.copy_dims)
        cuda_graph.copy_dst = [collapse(buffers[i], d) for i, d in zip(copy_inputs, cuda_graph.copy_dims)]
        cuda_graph.single = isinstance(out, torch.Tensor) and plan[0][0] == "pool"
        return RunResult(out, infos, cuda_graph, input_buffers, kernels=kernels)

    def _capture(self, graph: torch.cuda.CUDAGraph, fn: Callable, inputs: list, watcher: RunWatcher) -> Any:
        """Capture `fn(*inputs)` into `graph` on the tree's stream, in the tree's pool.

        Whether the capture itself failed is asked of CUDA (ending the capture fails when an
        op broke it), not read from an exception's text: a broken capture raises
        CaptureUnsupported; an exception of the function's own propagates unchanged. Either
        way the current stream, the allocator's routing to the pool and the pool's use count
        are put back, so the tree and the caller's stream go on working.
        """
        failure: Optional[BaseException] = None
        cause: Optional[BaseException] = None
        try:
            torch.cuda.synchronize(self.device)
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.stream):
                graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")
                try:
                    with watcher:
                        out = fn(*inputs)
                except BaseException as exc:  # ended below, then re-raised as it was
                    failure = exc
                try:
                    with warnings.catch_warnings():
                        if failure is not None:  # a capture cut short by the function may be empty
                            warnings.filterwarnings("ignore", message="The CUDA Graph is empty")
                        graph.capture_end()
                except RuntimeError as end_error:
                    cause = failure if failure is not None else end_error
                    detail = watcher.capture_blocker() or describe_exception(cause).splitlines()[0]
                    self._abandon_capture(detail)
                    raise CaptureUnsupported(f"capturing it failed: {detail}") from cause
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
            if watcher.host_sync is not None:  # refused at the op: the capture itself ended cleanly
                raise CaptureUnsupported(f"capturing it failed: {watcher.capture_blocker()}") from failure
            if failure is not None:
                raise failure
            return out
        finally:
            # an exception raised from here keeps this frame in its traceback: holding the
            # exceptions in its locals too would make a cycle that keeps the inputs alive
            failure = cause = None  # noqa: F841

    def _abandon_capture(self, detail: str) -> None:
        """After a capture CUDA broke (an op cgviz could not refuse first), torch's capture_end
        stops early: the thread still allocates into the pool, the pool's use taken at
        capture_begin is never released, the CUDA random generator still believes a capture is
        running (every random op would raise "Offset increment outside graph capture"), and
        torch's pinned-host allocator still records into the pool, which no Python call can end.
        The first three are put right (an empty capture in a pool of its own, ending normally,
        closes the generator's capture); the last means this pool can take no more captures, so
        later recordings run eagerly with that reason."""
        compat.cuda_function("end_allocate_to_pool")(self.index, self.pool)
        compat.cuda_function("release_pool")(self.index, self.pool)
        closer = torch.cuda.CUDAGraph()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The CUDA Graph is empty")
            closer.capture_begin(capture_error_mode="thread_local")
            closer.capture_end()
        self.capture_disabled = (
            f"this tree's pool can take no more captures: an earlier capture failed inside CUDA ({detail}) "
            "and torch leaves its host allocator recording into the pool; make a new Tree"
        )

    def replay(self, graph: CudaGraph, args: Sequence[Any], copy_inputs: Sequence[int]) -> tuple[Any, list]:
        if graph.expanded:
            for dst, i, dims in zip(graph.copy_dst, copy_inputs, graph.copy_dims):
                dst.copy_(collapse(args[i], dims))
        elif len(copy_inputs) == 1:  # one copy_ launches faster than a foreach of one
            graph.copy_dst[0].copy_(args[copy_inputs[0]])
        elif copy_inputs:
            compat.foreach_copy(graph.copy_dst, [args[i] for i in copy_inputs])
        graph.graph.replay()
        if graph.single:
            cached = graph.cached[0] if graph.cached else None
            if cached is None or cached.tensors is None:
                ptr, nbytes = graph.groups[0]
                # no local keeps the storage object: the cache's reference counts start clean
                cached = self._cache(
                    graph, 0, [self._build(graph.leaves[0].meta, self._make_storage(ptr, self.device, nbytes))]
                )
                graph.cached_refs = [cached]
            return cached.tensors[0], graph.cached_refs
        groups = [self._group_tensors(graph, g) for g in range(len(graph.groups))]
        user_leaves, refs = [], []
        for plan in graph.leaves:
            if plan.kind == "pool":
                t = groups[plan.group][plan.member]
                refs.append(graph.cached[plan.group])
            elif plan.kind == "input":  # as in eager: a view of the caller's tensor
                target = args[plan.index]
                t = target.new_empty(0).set_(
                    target.untyped_storage(), plan.meta["storage_offset"] + target.storage_offset(),
                    plan.meta["size"], plan.meta["stride"],
                )
                refs.append(None)
            elif plan.kind == "external":
                t = plan.value
                refs.append(None)
            else:
                user_leaves.append(plan.value)
                continue
            user_leaves.append(t)
        return tree_unflatten(user_leaves, graph.spec), refs

    def steady_replay(self, graph: CudaGraph, copy_inputs: Sequence[int]) -> Optional[Callable[[Sequence[Any]], Any]]:
        """The inference loop's replay of a graph taking one copied input and returning one tensor,
        cached (engine/steady.py): its liveness as CachedOutput.alive() says, then the input copy
        and the launch, in one frame; NOT_NOW while the output is live or no longer cached. None
        for other graphs."""
        cached = graph.cached[0] if graph.single and graph.cached else None
        if cached is None or cached.tensors is None or graph.expanded or len(copy_inputs) != 1:
            return None
        alive, launch = cached.alive, graph.graph.replay
        dst, index = graph.copy_dst[0], copy_inputs[0]

        def replay_one_copied(args: Sequence[Any]) -> Any:
            tensors = cached.tensors
            if tensors is None or alive():
                return NOT_NOW
            dst.copy_(args[index])
            launch()
            return tensors[0]
        return replay_one_copied

    def _group_tensors(self, graph: CudaGraph, group: int) -> list:
        """The tensors of one output storage: the cached ones, or new ones that get cached."""
        cached = graph.cached[group] if graph.cached else None
        if cached is not None and cached.tensors is not None:
            return cached.tensors
        ptr, nbytes = graph.groups[group]
        storage = self._make_storage(ptr, self.device, nbytes)
        tensors = [self._build(p.meta, storage) for p in graph.leaves if p.kind == "pool" and p.group == group]
        del storage  # the cache's reference counts are taken with nothing else holding it
        return self._cache(graph, group, tensors).tensors

    def _cache(self, graph: CudaGraph, group: int, tensors: list) -> "CachedOutput":
        if not graph.cached:
            graph.cached = [None] * len(graph.groups)
        cached = graph.cached[group] = CachedOutput(tensors)
        self._caches.add(cached)
        return cached

    def drop_cached_outputs(self) -> None:
        """Let go of every cached output tensor (before the allocator's state is restored:
        live outputs become the allocator's again, dead ones are freed)."""
        for cached in self._caches:
            cached.drop()
        self._caches.clear()

    def check_cloning(self) -> None:
        if compat.storage_from_weak_ref is None or compat.swap_storage_memory is None:
            raise RuntimeError(
                f"generation cloning on a cuda tree needs torch.UntypedStorage._new_with_weak_ptr and "
                f"_swap_data_ptr_, which torch {torch.__version__} lacks; use device='sim'"
            )

    def clone_out(self, ref: Any) -> int:
        """As torch 2.14+'s _clone_live_user_visible_storages: the storage's bytes are copied to
        new memory outside the pool and the storage is swapped onto it, so every tensor on it
        keeps its values; the pool memory goes with the replacement storage object (back to the
        pool when it is allocator memory, nowhere when it is a replay's view of graph memory)."""
        if isinstance(ref, CachedOutput):
            ref.drop()  # its tensors are the user's now, on the copy
        storage = compat.storage_from_weak_ref(ref.cdata)
        nbytes = storage.nbytes()
        with torch.cuda.device(self.device):
            replacement = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            source = torch.empty(0, dtype=torch.uint8, device=self.device).set_(storage, 0, (nbytes,), (1,))
            replacement.copy_(source)
            compat.swap_storage_memory(storage, replacement.untyped_storage())
        ref.cloned = True
        return nbytes

    def _describe(self, leaves: list, inputs: Sequence[Any], new_storages: set[int]):
        """LeafInfo per tensor leaf, and (kind, group or input index) per leaf for replays.

        Leaves on a storage the run allocated are pool outputs, grouped by storage; the
        first leaf of a group owns it, later ones are aliases ("output k").
        """
        input_storages = {
            compat.storage_id(a.untyped_storage()): i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)
        }
        groups: dict[int, tuple[int, int]] = {}  # storage id -> (group, info index of its first leaf)
        members: dict[int, list] = {}
        pool_infos: list[tuple[LeafInfo, int]] = []
        infos: list[LeafInfo] = []
        plan: list[tuple[str, int]] = []
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                plan.append(("constant", -1))
                continue
            st = leaf.untyped_storage()
            sid = compat.storage_id(st)
            info = LeafInfo(
                list(leaf.shape), str(leaf.dtype).removeprefix("torch."), leaf.numel() * leaf.element_size(),
                leaf.data_ptr(), None, None,
            )
            if sid not in new_storages or st.nbytes() == 0:  # no memory: nothing to track (as torch)
                if sid in input_storages:
                    plan.append(("input", input_storages[sid]))
                    info.alias_of = f"input {input_storages[sid]}"
                else:
                    plan.append(("external", -1))
                    info.alias_of = "external"
            else:
                if sid not in groups:
                    groups[sid] = (len(groups), len(infos))
                    members[sid] = []
                group, first = groups[sid]
                members[sid].append(leaf)
                info.alias_of = None if first == len(infos) else f"output {first}"
                plan.append(("pool", group))
                pool_infos.append((info, sid))
            infos.append(info)
        refs = {sid: CudaRef(ts[0].untyped_storage(), ts) for sid, ts in members.items()}
        for info, sid in pool_infos:
            info.ref = refs[sid]
        return infos, plan


@contextlib.contextmanager
def _cublas_workspaces_cleared() -> Iterator[None]:
    """cuBLAS can keep a workspace per handle and stream across calls (by default through torch
    2.14; in 2.15 only with TORCH_CUBLAS_WORKSPACE_CACHE=1). Cleared before a warmup or
    a capture, the workspace a matmul needs is allocated in the tree's pool and accounted
    for there; cleared after, none stays behind holding pool memory that a later step would
    hand out again, or that would keep the pool alive once the tree is gone (torch's trees
    do the same)."""
    clear = compat.cuda_function("clear_cublas_workspaces")
    clear()
    try:
        yield
    finally:
        clear()


@contextlib.contextmanager
def _no_garbage_collection() -> Iterator[None]:
    """No cyclic collection while capturing: collecting an unrelated tree there would destroy its
    graphs and free memory on the capturing thread, which invalidates the capture."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _leaf_plan(leaf: Any, kind: str, index: int) -> _Leaf:
    if kind == "constant":
        return _Leaf("constant", value=leaf)
    if kind == "external":
        return _Leaf("external", value=leaf)
    meta = {
        "nbytes": leaf.untyped_storage().nbytes(),
        "data_ptr": leaf.untyped_storage().data_ptr(),
        "size": leaf.size(),
        "stride": leaf.stride(),
        "dtype": leaf.dtype,
        "device": leaf.device,
        "storage_offset": leaf.storage_offset(),
    }
    if kind == "pool":
        return _Leaf(kind, group=index, meta=meta)
    return _Leaf(kind, index=index, meta=meta)
