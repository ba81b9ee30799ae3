"""CPU simulation of a CUDA graph tree's device operations.

Record runs the function once, with every storage it allocates entered into a model
of the caching allocator's private pool (engine/pool_model.py); its pool outputs
become the graph's static storages. Replay copies non-static inputs into the recorded
input buffers, re-runs the function and copies the results into the same static
storages, so outputs alias and get overwritten as they would on a GPU. Addresses of
pool memory come from the model; tensors outside the pool report their CPU address.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten, tree_unflatten

from cgviz.engine._torch_compat import storage_id, storage_use_count
from cgviz._torch.allocator import RawBlock, RawSegment
from cgviz.engine.backend import CaptureUnsupported, LeafInfo, RunResult
from cgviz.engine.inputs import collapse, expanded_dims, input_buffer
from cgviz.engine.pool_model import PoolModel
from cgviz.engine.profile import WallTimer
from cgviz.engine.sim_addresses import OutsideAddresses
from cgviz.engine.sim_output import Guard, SimOutput, unwrap, wrap
from cgviz.engine.watch import CaptureBroken, RunWatcher, prepare, rebase


class SimRef:
    """Liveness of one output storage, and the guard that invalidates its tensors."""

    __slots__ = ("guard", "_weak", "_sid", "cloned")

    def __init__(self, guard: Guard, storage: torch.UntypedStorage, kept_by_graph: bool) -> None:
        self.guard = guard
        self.cloned = False  # copied out of the pool at a new generation: no longer the tree's
        # a graph keeps its static storage, so liveness is "referenced by more than the graph"
        self._sid = storage_id(storage) if kept_by_graph else None
        self._weak = None if kept_by_graph else StorageWeakRef(storage)

    def alive(self) -> bool:
        if self.guard.error is not None or self.cloned:
            return False
        if self._sid is not None:
            return storage_use_count(self._sid) > 1
        return not self._weak.expired()

    def invalidate(self, message: str) -> None:
        self.guard.invalidate(message)


@dataclass
class _LeafPlan:
    kind: str  # "pool" (group index), "alias" (of an input, an external tensor or a constant)
    alias: Optional[str] = None
    group: int = -1
    offset: int = 0
    size: tuple = ()
    stride: tuple = ()
    dtype: Any = None
    index: int = -1  # the input an "alias" leaf views, or -1


@dataclass
class SimGraph:
    fn: Callable
    buffers: dict[int, torch.Tensor]
    storages: list[torch.UntypedStorage]  # one per pool storage group: the static outputs
    plan: list[_LeafPlan]
    spec: Any
    first_leaf: list[int] = field(default_factory=list)  # group -> index of a result leaf on it
    copy_dims: dict[int, tuple[int, ...]] = field(default_factory=dict)  # input -> its expanded dims


class SimBackend:
    """The Backend protocol on the CPU, with a modelled pool."""

    name = "sim"

    def __init__(self) -> None:
        prepare()
        self.device = torch.device("cpu")
        self.pool = PoolModel()
        self._addresses: dict[int, tuple[int, int, StorageWeakRef]] = {}  # storage id -> (addr, nbytes, weak)
        self._tracked: dict[int, Any] = {}  # pool address -> liveness (an object with .alive())
        self._outside = OutsideAddresses()

    # -- facts -----------------------------------------------------------------------------
    def timer(self) -> WallTimer:
        return WallTimer()

    def describe(self) -> dict:
        return {"backend": "sim", "device": "cpu (simulated CUDA pool)", "torch": str(torch.__version__)}

    def unsupported_input(self, t: torch.Tensor) -> Optional[str]:
        if t.device.type != "cpu":
            return f"is on {t.device}, but a sim tree computes on the CPU"
        if t.layout != torch.strided:
            return f"has layout {t.layout}; graphs take strided tensors"
        return None

    def address(self, t: torch.Tensor) -> int:
        if isinstance(t, SimOutput):
            t = unwrap(t)
        st = t.untyped_storage()
        entry = self._addresses.get(storage_id(st))
        if entry is not None:
            return entry[0] + t.storage_offset() * t.element_size()
        return self._outside.of(st) + t.storage_offset() * t.element_size()

    # -- the pool --------------------------------------------------------------------------
    def _allocate(self, st: torch.UntypedStorage, keep: bool = False) -> int:
        """Give a newly seen storage a block in the pool (again if it was resized)."""
        sid = storage_id(st)
        nbytes = st.nbytes()
        entry = self._addresses.get(sid)
        if entry is not None:
            if entry[1] == nbytes:
                return entry[0]
            self._free(entry[0])
        if nbytes == 0:
            return 0
        address = self.pool.malloc(nbytes)
        self._addresses[sid] = (address, nbytes, StorageWeakRef(st))
        if not keep:
            self._tracked[address] = _Weak(StorageWeakRef(st))
        return address

    def _free(self, address: int) -> None:
        self._tracked.pop(address, None)
        if self.pool.block_at(address) is not None:
            self.pool.free(address)

    def collect(self) -> None:
        """Free the blocks whose storages died (what the allocator's deleters do on a GPU)."""
        for address in [a for a, probe in self._tracked.items() if not probe.alive()]:
            self._free(address)
        for sid in [s for s, (_, _, weak) in self._addresses.items() if weak.expired()]:
            del self._addresses[sid]
        self._outside.forget_dead()

    def checkpoint(self) -> Any:
        self.collect()  # the recording's intermediates are dead by now
        return self.pool.checkpoint()

    def restore(self, state: Any, live: Sequence[tuple[int, Any]], dead_addresses: Sequence[int]) -> None:
        self.pool.apply_checkpoint(state)
        self._tracked = {address: ref for address, ref in live}
        for address in dict.fromkeys(dead_addresses):
            self._free(address)

    def segments(self) -> list[RawSegment]:
        self.collect()
        return [
            RawSegment(
                s.address,
                s.size,
                s.kind,
                [RawBlock(b.address, b.size, b.requested, b.allocated) for b in s.blocks],
            )
            for s in self.pool.segments()
        ]

    # -- generation cloning ------------------------------------------------------------------
    def check_cloning(self) -> None:
        return None

    def clone_out(self, ref: "SimRef") -> int:
        """Each storage the output's tensors are on is copied out of the pool; the tensors move
        onto the copy under a new guard (the old one may still be invalidated with its run)."""
        tensors = list(ref.guard.tensors)
        ref.guard.tensors.clear()
        copies: dict[int, torch.UntypedStorage] = {}
        guard = Guard()
        nbytes = 0
        with torch._C.DisableTorchFunctionSubclass(), torch.no_grad():
            for t in tensors:
                st = t.untyped_storage()
                copy = copies.get(st.data_ptr())
                if copy is None:
                    copy = copies[st.data_ptr()] = torch.UntypedStorage(st.nbytes())
                    copy.copy_(st)
                    nbytes += st.nbytes()
                t.set_(copy, t.storage_offset(), t.size(), t.stride())
                t._cgviz_guard = guard
                guard.tensors.add(t)
        ref.cloned = True
        self.collect()
        return nbytes

    # -- running -----------------------------------------------------------------------------
    def _watcher(self, inputs: Sequence[Any], capturing: bool) -> RunWatcher:
        """Enter every storage the run allocates into the pool; free intermediates as they die.
        While `capturing`, an op needing the host fails as it would inside a CUDA capture."""
        return RunWatcher(on_new_storage=self._allocate, after_op=self.collect, inputs=inputs, refuse_host_sync=capturing)

    def warmup(self, fn: Callable, args: Sequence[Any]) -> RunResult:
        inputs = [unwrap(a) if isinstance(a, torch.Tensor) else a for a in args]
        self.collect()
        watcher = self._watcher(inputs, capturing=False)
        with watcher:
            out = fn(*inputs)
        leaves, spec = tree_flatten(out)
        infos, user_leaves = self._describe(leaves, inputs, inputs, watcher.new_storages, kept=None, guards=_guards(args))
        return RunResult(
            tree_unflatten(user_leaves, spec), infos, capture_blocker=watcher.capture_blocker(),
            mutated=frozenset(watcher.mutated),
        )

    def record(self, fn: Callable, args: Sequence[Any], copy_inputs: Sequence[int]) -> RunResult:
        self.collect()
        before = self.pool.checkpoint()
        inputs = [unwrap(a) if isinstance(a, torch.Tensor) else a for a in args]
        buffers: dict[int, torch.Tensor] = {}
        input_buffers: dict[int, int] = {}
        watcher: Optional[RunWatcher] = None
        try:
            for i in copy_inputs:
                buf = input_buffer(inputs[i])
                input_buffers[i] = self._allocate(buf.untyped_storage(), keep=True)
                buffers[i] = inputs[i] = buf
            watcher = self._watcher(inputs, capturing=True)
            with watcher:
                out = fn(*inputs)
            if watcher.host_sync is not None:  # refused, but the function carried on
                raise CaptureBroken(watcher.capture_blocker())
        except BaseException as exc:
            self.pool.restore(before)
            self.collect()
            if watcher is not None and watcher.host_sync is not None:  # as a broken capture on a GPU
                raise CaptureUnsupported(f"capturing it failed: {watcher.capture_blocker()}") from exc
            raise
        for address in input_buffers.values():
            self._free(address)  # as on a GPU: only this graph writes its input buffers, when it replays
        leaves, spec = tree_flatten(out)
        graph = SimGraph(fn, buffers, [], [], spec, copy_dims={i: expanded_dims(b) for i, b in buffers.items()})
        originals = [unwrap(a) if isinstance(a, torch.Tensor) else a for a in args]
        infos, user_leaves = self._describe(
            leaves, inputs, originals, watcher.new_storages, kept=graph, guards=_guards(args)
        )
        return RunResult(tree_unflatten(user_leaves, spec), infos, graph, input_buffers)

    def replay(self, graph: SimGraph, args: Sequence[Any], copy_inputs: Sequence[int]) -> tuple[Any, list]:
        inputs = [unwrap(a) if isinstance(a, torch.Tensor) else a for a in args]
        for i in copy_inputs:
            dims = graph.copy_dims[i]
            collapse(graph.buffers[i], dims).copy_(collapse(inputs[i], dims))
            inputs[i] = graph.buffers[i]
        leaves, _ = tree_flatten(graph.fn(*inputs))
        for group, leaf_index in enumerate(graph.first_leaf):
            graph.storages[group].copy_(leaves[leaf_index].untyped_storage())
        guards = [Guard() for _ in graph.storages]
        group_refs = [SimRef(g, st, kept_by_graph=True) for g, st in zip(guards, graph.storages)]
        user_leaves, refs = [], []
        for leaf, plan in zip(leaves, graph.plan):
            if plan.kind == "pool":
                st = graph.storages[plan.group]
                view = torch.empty(0, dtype=plan.dtype).set_(st, plan.offset, plan.size, plan.stride)
                user_leaves.append(wrap(view, guards[plan.group]))
                refs.append(group_refs[plan.group])
            else:
                if plan.index in graph.buffers:
                    leaf = rebase(leaf, graph.buffers[plan.index], unwrap(args[plan.index]))
                if plan.index >= 0 and isinstance(args[plan.index], SimOutput):
                    leaf = wrap(leaf, args[plan.index]._cgviz_guard)
                user_leaves.append(leaf)
                if isinstance(leaf, torch.Tensor):
                    refs.append(None)
        return tree_unflatten(user_leaves, graph.spec), refs

    def steady_replay(self, graph: SimGraph, copy_inputs: Sequence[int]) -> None:
        """Every replay runs the function again here: the tree's own steps serve the loop."""
        return None

    def _describe(
        self, leaves: list, inputs: list, originals: list, allocated: set[int], kept: Optional[SimGraph], guards: dict
    ):
        """Classify each output leaf: own pool memory of this run (grouped by storage) or an alias.

        With `kept` (a recording), pool storages become the graph's static storages.
        """
        input_storages = {
            storage_id(a.untyped_storage()): i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)
        }
        groups: dict[int, tuple[int, Guard, SimRef, int]] = {}  # storage id -> (group, guard, ref, first)
        infos: list[LeafInfo] = []
        user_leaves: list = []
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                user_leaves.append(leaf)
                if kept is not None:
                    kept.plan.append(_LeafPlan("alias"))
                continue
            st = leaf.untyped_storage()
            sid = storage_id(st)
            if sid not in allocated or st.nbytes() == 0:
                index = input_storages.get(sid, -1)
                alias = f"input {index}" if index >= 0 else "external"
                if index >= 0 and inputs[index] is not originals[index]:  # a copied input's buffer
                    leaf = rebase(leaf, inputs[index], originals[index])
                if index in guards:  # a view of a tree output: invalidated with it
                    leaf = wrap(leaf, guards[index])
                user_leaves.append(leaf)
                infos.append(_info(leaf, self.address(leaf), alias, None))
                if kept is not None:
                    kept.plan.append(_LeafPlan("alias", alias, index=index))
                continue
            if sid not in groups:
                guard = Guard()
                if kept is not None:
                    kept.storages.append(st)
                    kept.first_leaf.append(len(user_leaves))
                    self._tracked[self._addresses[sid][0]] = _UseCount(sid)
                ref = SimRef(guard, st, kept_by_graph=kept is not None)
                groups[sid] = (len(groups), guard, ref, len(infos))
            group, guard, ref, first = groups[sid]
            alias = None if first == len(infos) else f"output {first}"
            if kept is not None:
                kept.plan.append(
                    _LeafPlan("pool", alias, group, leaf.storage_offset(), tuple(leaf.size()), tuple(leaf.stride()), leaf.dtype)
                )
            infos.append(_info(leaf, self.address(leaf), alias, ref))
            user_leaves.append(wrap(leaf, guard))
        return infos, user_leaves


class _Weak:
    __slots__ = ("weak",)

    def __init__(self, weak: StorageWeakRef) -> None:
        self.weak = weak

    def alive(self) -> bool:
        return not self.weak.expired()


class _UseCount:
    __slots__ = ("sid",)

    def __init__(self, sid: int) -> None:
        self.sid = sid

    def alive(self) -> bool:
        return storage_use_count(self.sid) > 1


def _info(t: torch.Tensor, address: int, alias: Optional[str], ref) -> LeafInfo:
    return LeafInfo(list(t.shape), str(t.dtype).removeprefix("torch."), t.numel() * t.element_size(), address, alias, ref)


def _guards(args: Sequence[Any]) -> dict[int, Guard]:
    """Guards of the tree outputs among the inputs, by input index."""
    return {i: a._cgviz_guard for i, a in enumerate(args) if isinstance(a, SimOutput)}
