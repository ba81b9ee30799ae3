"""The parity harness: one small API over torch's own CUDA graph tree manager
(torch/_inductor/cudagraph_trees.py) and over cgviz.Tree("cuda").

The test_torch_parity*.py modules port behaviours of torch's test/inductor/test_cudagraph_trees.py
(each named in its test's docstring) to plain functions; test_torch_random_parity.py runs random
workloads. Each workload runs twice: through torch's CUDAGraphTreeManager, reached with
torch._inductor.cudagraph_trees.cudagraphify as compiled code reaches it, and through
cgviz.Tree("cuda"). Both must agree on

* the decision of every call: warmup / record / execute / eager / error,
* the tree of recorded graphs (the function and the parent of each graph, in recording order),
* the number of checkpoint restores,
* what the workload observed: pool blocks and bytes, stale-output errors, values against eager.

Where cgviz differs on purpose (docs/engine.md), the test asserts the documented difference and
says so. A torch.compile'd function knows from its graph what a plain function shows only when it
runs: that it mutates an input or copies to the host. torch.compile then never cudagraphifies it
(or the manager runs it eagerly from its first call); cgviz sees it at the first call, its warmup
("seen at warmup" in docs/engine.md). `first_call_eager` marks those functions.

torch.compile starts a new generation at every compiled invocation; plain functions only get one
from torch.compiler.cudagraph_mark_step_begin(), cgviz's Tree.mark_step(). Workloads that port a
test relying on those generations call mark_step() where torch.compile would tick.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import traceback
from typing import Any, Callable, Optional

import pytest
import torch
import torch._inductor.config as inductor_config
from torch._inductor import cudagraph_trees as cgt

import cgviz
from helpers import DECISIONS

DEV = "cuda"
OVERWRITTEN = "overwritten by a subsequent run"
W, R, E, EAGER, ERR = "warmup", "record", "execute", "eager", "error"


def pool_stats(pool) -> tuple[int, int, int]:
    """(reserved bytes, live blocks, segments) of one private pool, counted as torch's tests do."""
    pool = tuple(pool)
    segments = [s for s in torch.cuda.memory_snapshot() if tuple(s.get("segment_pool_id", ())) == pool]
    live = sum(1 for s in segments for b in s["blocks"] if b["state"] == "active_allocated")
    return sum(s["total_size"] for s in segments), live, len(segments)


def cdata(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def rand(*shape) -> torch.Tensor:
    return torch.rand(*shape, device=DEV)


class _Side:
    """What both sides share: the calls' decisions, the workload's notes, pool and value checks."""

    kind = ""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (function name, decision) per call
        self.notes: list[tuple[str, Any]] = []  # (label, value) observed by the workload
        self.final: dict = {}
        self._functions: list = []
        self.pool: Any = None

    def note(self, label: str, value: Any) -> None:
        self.notes.append((label, value))

    def check(self, label: str, got: Any, want: Any, **tolerance) -> None:
        try:
            torch.testing.assert_close(got, want, **tolerance)
        except AssertionError as e:
            raise AssertionError(f"{self.kind}: {label}: result differs from eager: {e}") from None

    @staticmethod
    def is_stale(t: torch.Tensor) -> bool:
        """Does touching t's data raise 'accessing tensor output of CUDAGraphs that has been
        overwritten by a subsequent run'?"""
        try:
            torch.add(t, 0)
        except RuntimeError as e:
            if OVERWRITTEN in str(e):
                return True
            raise
        return False

    def live_blocks(self) -> int:
        return pool_stats(self.pool)[1]

    def reserved(self) -> int:
        return pool_stats(self.pool)[0]

    def finish(self) -> None:
        self.final = {"graphs": self.graphs(), "checkpoints": self.checkpoints()}
        self._close()
        self._functions.clear()
        self._collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        self.final["segments_after_close"] = pool_stats(self.pool)[2]

    def _collect(self) -> None:
        gc.collect()

    # per side
    def graphs(self) -> list[tuple[str, Optional[int]]]:
        raise NotImplementedError

    def checkpoints(self) -> int:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError


def _signature(inputs: list) -> tuple:
    return tuple(
        (a.shape, a.stride(), a.dtype, a.device, a.requires_grad) if isinstance(a, torch.Tensor) else (type(a), a)
        for a in inputs
    )


def _placeholders(n: int) -> list:
    """PlaceholderInfo per input, as inductor passes them (used in torch's skip/log messages)."""
    from torch._inductor.cudagraph_utils import PlaceholderInfo

    out = []
    for i in range(n):
        values = {}
        for f in dataclasses.fields(PlaceholderInfo):
            values[f.name] = f"arg{i}_1" if f.name == "name" else ([] if f.name == "users" else None)
        out.append(PlaceholderInfo(**values))
    return out


class _TorchFunction:
    """A plain function run the way torch.compile(mode="reduce-overhead") runs its compiled graph:
    one cudagraphify()'d function per input signature (a recompile per shape), boxed inputs.

    mutates: the input indices the compiled graph mutates (inductor knows them from the graph).
    skip: inductor's reason for never cudagraphifying this graph ("skipping cudagraphs due to
    ..."); the function then runs eagerly at every call.
    """

    def __init__(self, side: "TorchTree", fn: Callable, name: str, static, mode: str, mutates, skip) -> None:
        self.side = side
        self.fn = fn
        self.name = name
        self.static = tuple(static)
        self.mode = mode
        self.mutates = tuple(mutates)
        self.skip = skip
        self.single = True
        self.variants: dict[tuple, Callable] = {}

    def __call__(self, *args):
        side = self.side
        side._events.clear()
        try:
            out = self._run(list(args))
        except BaseException:
            side.calls.append((self.name, ERR))
            raise
        side.calls.append((self.name, side._events[0] if side._events else EAGER))
        return out

    def _model(self, traces: list) -> Callable:
        fn = self.fn

        def model(inputs):
            args = list(inputs)
            inputs.clear()  # the boxed convention: the manager checks the list is empty afterwards
            out = fn(*args)
            del args
            self.single = isinstance(out, torch.Tensor)
            outs = [out] if self.single else list(out)
            del out
            if not traces:  # one stack trace per output, as inductor passes them (unknown here)
                traces.extend([None] * len(outs))
            return outs

        model.__name__ = self.name
        return model

    def _unbox(self, outs):
        return outs[0] if self.single else tuple(outs)

    def _run(self, inputs: list):
        if self.skip is not None:
            return self.fn(*inputs)  # inductor did not cudagraphify this graph: plain eager runs
        key = _signature(inputs)
        compiled = self.variants.get(key)
        if compiled is not None:
            return self._unbox(compiled(inputs))
        traces: list = []
        # as cudagraphify_impl: only a function whose first call returned is kept (a first call
        # that raises is compiled again at the next call)
        options = {
            "device_index": self.side.device_index,
            "is_backward": self.mode == "backward",
            "is_inference": self.mode == "inference",
            "stack_traces": traces,
            "placeholders": _placeholders(len(inputs)),
            "mutated_input_idxs": self.mutates,
        }
        accepted = inspect.signature(cgt.cudagraphify).parameters
        options = {k: v for k, v in options.items() if k in accepted}
        compiled, out = cgt.cudagraphify(self._model(traces), inputs, self.static, **options)
        self.variants[key] = compiled
        self.side._names[compiled.keywords["function_id"].id] = self.name
        return self._unbox(out)


class TorchTree(_Side):
    """torch's CUDAGraphTreeManager for device 0 (per thread), with its decisions logged by
    wrapping run_eager (warmup), record_function (record) and execute_node (execute); a call
    that reaches none of them ran eagerly."""

    kind = "torch"

    def __init__(self, rerecord_limit: int = 8) -> None:
        super().__init__()
        cgt.reset_cudagraph_trees()
        self._config = inductor_config.patch({"triton.cudagraph_unexpected_rerecord_limit": rerecord_limit})
        self._config.__enter__()
        self.device_index = torch.cuda.current_device()
        container = cgt.get_container(self.device_index)
        # the container drops its manager when every cudagraphify()'d function is gone (a first
        # call that raises leaves none): hold one reference for the whole workload
        self._anchor = lambda: None
        container.add_strong_reference(self._anchor)
        self.manager = container.get_tree_manager()
        self.pool = self.manager.cuda_graphs_thread_pool
        self._names: dict[int, str] = {}
        self._events: list[str] = []
        events = self._events
        for method, kind in (("run_eager", W), ("record_function", R), ("execute_node", E)):
            original = getattr(self.manager, method)

            def logged(*args, _original=original, _kind=kind, **kwargs):
                events.append(_kind)
                return _original(*args, **kwargs)

            setattr(self.manager, method, logged)

    def wrap(self, fn, static=(), name=None, mode="inference", mutates=(), skip=None):
        f = _TorchFunction(self, fn, name or fn.__name__, static, mode, mutates, skip)
        self._functions.append(f)
        return f

    def mark_step(self) -> None:
        torch.compiler.cudagraph_mark_step_begin()

    def pending_backward(self) -> bool:
        return bool(self.manager.running_forwards_with_pending_backwards)

    def checkpoints(self) -> int:
        return self.manager.debug_checkpointing_counter

    def graphs(self):
        nodes, stack = [], list(self.manager.get_roots())
        while stack:
            node = stack.pop()
            nodes.append(node)
            for children in node.children.values():
                stack.extend(children)
        nodes.sort(key=lambda n: n.id.id)
        index = {n.id.id: i for i, n in enumerate(nodes)}
        return [
            (self._names.get(n.wrapped_function.id.id, "?"), None if n.parent is None else index[n.parent.id.id])
            for n in nodes
        ]

    def _close(self) -> None:
        gc.collect()  # cyclic garbage holding the manager's graphs goes while their pool lives
        cgt.reset_cudagraph_trees()
        self.manager = None
        self._config.__exit__(None, None, None)

    def _collect(self) -> None:  # its own frame: a crash while collecting names the side
        gc.collect()


class CgvizTree(_Side):
    """cgviz.Tree("cuda"); a call's decision is the last warmup/record/execute/eager/error step
    it added to the trace."""

    kind = "cgviz"

    def __init__(self, rerecord_limit: int = 8, **tree_options) -> None:
        super().__init__()
        self.tree = cgviz.Tree(DEV, trace="full", rerecord_limit=rerecord_limit, **tree_options)
        self.pool = self.tree.backend.pool

    def wrap(self, fn, static=(), name=None, mode="inference", mutates=(), skip=None):
        # mutates / skip are what torch.compile knows from the graph; cgviz finds out by itself
        f = self.tree.wrap(fn, static=static, name=name, mode=mode)
        label = f.name
        side = self

        def call(*args):
            before = len(side.tree.trace.expanded())
            try:
                out = f(*args)
            except BaseException:
                side.calls.append((label, ERR))
                raise
            kinds = [s.kind for s in side.tree.trace.expanded()[before:] if s.kind in DECISIONS]
            side.calls.append((label, kinds[-1] if kinds else "no decision step"))
            return out

        self._functions.append(call)
        return call

    def mark_step(self) -> None:
        self.tree.mark_step()

    def pending_backward(self) -> bool:
        return self.tree.pending_backward > 0

    def checkpoints(self) -> int:
        return sum(1 for s in self.tree.trace.expanded() if s.kind == "checkpoint_restore")

    def graphs(self):
        nodes = [n for n in self.tree.nodes if n.kind == "graph"]
        index = {n.id: i for i, n in enumerate(nodes)}
        return [(n.variant.label, None if n.parent is None else index.get(n.parent.id, "?")) for n in nodes]

    def _close(self) -> None:
        gc.collect()  # cyclic garbage holding the tree's graphs goes while their pool lives
        self.tree = None

    def _collect(self) -> None:  # its own frame: a crash while collecting names the side
        gc.collect()


def run_side(cls: type, workload: Callable[[_Side], None], **options) -> _Side:
    """The workload through one side (`cls(**options)`), finished."""
    side = cls(**options)
    try:
        workload(side)
    except BaseException as exc:
        # free the workload's tensors now, while their pool lives: kept in a traceback that
        # pytest holds on to, they would be freed after the pool is gone, aborting the process
        traceback.clear_frames(exc.__traceback__)
        raise
    finally:
        side.finish()
    return side


def run_both(workload: Callable[[_Side], None], **options) -> tuple[TorchTree, CgvizTree]:
    """The same workload through torch's manager, then through cgviz."""
    return run_side(TorchTree, workload, **options), run_side(CgvizTree, workload, **options)


def format_calls(calls) -> str:
    return " ".join(f"{n}:{d}" for n, d in calls)


def _first_calls_eager(calls, names) -> list:
    """cgviz's first call of these functions is a warmup where torch's is eager (see the module
    docstring); cgviz may also decide 'eager' there."""
    seen, out = set(), []
    for name, decision in calls:
        if name in names and name not in seen and decision == W:
            decision = EAGER
        seen.add(name)
        out.append((name, decision))
    return out


def assert_parity(
    t: TorchTree,
    c: CgvizTree,
    *,
    expect: Optional[list] = None,
    first_call_eager=(),
    graphs: bool = True,
    checkpoints: bool = True,
    differ: Optional[dict] = None,
) -> None:
    """cgviz decided, built and observed what torch's manager did.

    expect: torch's decisions as the port expects them (a check of the harness).
    differ: {note label: (torch's value, cgviz's value)}: documented differences.
    """
    problems = []
    if expect is not None and [d for _, d in t.calls] != list(expect):
        problems.append(
            f"HARNESS: torch {torch.__version__}'s manager decided\n  {format_calls(t.calls)}\n"
            f"  the port expected {' '.join(expect)}"
        )
    calls = _first_calls_eager(c.calls, first_call_eager)
    if calls != t.calls:
        problems.append(f"decisions differ:\n  torch: {format_calls(t.calls)}\n  cgviz: {format_calls(c.calls)}")
    if graphs and c.final["graphs"] != t.final["graphs"]:
        problems.append(
            f"recorded graphs (function, parent index) differ:\n  torch: {t.final['graphs']}\n"
            f"  cgviz: {c.final['graphs']}"
        )
    if checkpoints and c.final["checkpoints"] != t.final["checkpoints"]:
        problems.append(f"checkpoint restores: torch {t.final['checkpoints']}, cgviz {c.final['checkpoints']}")
    differ = differ or {}
    tn, cn = dict(t.notes), dict(c.notes)
    for label, (want_t, want_c) in differ.items():
        if tn.get(label) != want_t:
            problems.append(f"HARNESS: torch's {label!r} is {tn.get(label)!r}, expected {want_t!r}")
        if cn.get(label) != want_c:
            problems.append(f"documented difference {label!r}: cgviz {cn.get(label)!r}, expected {want_c!r}")
    if [lab for lab, _ in t.notes] != [lab for lab, _ in c.notes]:
        problems.append(f"notes differ:\n  torch: {t.notes}\n  cgviz: {c.notes}")
    else:
        for (label, tv), (_, cv) in zip(t.notes, c.notes):
            if label not in differ and tv != cv:
                problems.append(f"{label}: torch {tv!r}, cgviz {cv!r}")
    assert not problems, "\n".join(problems)


@pytest.fixture(autouse=True)
def fresh_trees():
    """torch's trees reset and the pools' memory freed before and after each test (a test module
    imports this autouse fixture)."""
    gc.collect()
    cgt.reset_cudagraph_trees()
    yield
    cgt.reset_cudagraph_trees()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
