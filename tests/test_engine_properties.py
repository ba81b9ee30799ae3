"""Property-based test of the tree engine on the sim backend.

A hypothesis state machine drives a `cgviz.Tree("sim")` with a few small wrapped
functions (elementwise, a static input, several outputs sharing a storage, an output
aliasing its input, one that raises on demand): single calls on fresh inputs or on
outputs the user still holds (so that children and long paths appear), short loops of
calls repeated like training steps (so that graphs replay), dropping held outputs,
views the user keeps, `mark_step()`, moving or updating the static input, and touching
invalidated outputs. After every step it checks what the engine promises:

* every result equals the eager result of the same function on the same inputs, and
  every held output that was not invalidated still equals it (a replay must never
  overwrite memory the user still holds);
* every live output belongs to a node on the current path, and the engine sees as live
  exactly the outputs the user holds;
* a recording copies user inputs into the graph and keeps live tree outputs in place;
* the memory of live outputs is pairwise disjoint and owned by them in the snapshot's
  pool blocks; the pool's segments are tiled by their blocks;
* every output held across a `mark_step()` (and every view of it) raises "overwritten
  by a subsequent run" when touched, and so does passing it to a tree function.

The model is a list of held entries: (tensor, expected value, tree output?, invalidated?).
CI runs 300 sequences; CGVIZ_PROPERTY_EXAMPLES=N runs more. A plainer test of the first promise,
random programs of two functions, ends the module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import cgviz
from helpers import data, steps_of

OVERWRITTEN = "overwritten by a subsequent run"
SIZES = (8, 96)  # 32 B and 384 B: both round to one 512 B block; 96 also makes 95-element views
W_SIZE = 8


# -- the functions under test (pure, no in-place mutation of inputs, no host syncs) ------------
def f(x):
    return (x * 2 + 1).relu()


def g(y):
    return y.sin() * y - y.cumsum(0)


def h(x, w):
    return x * w + 1


def pair(x):
    """Three outputs: `a`, a view of `a` (same storage) and a separate tensor."""
    a = x * 3 - 1
    return a, a[1:], x.exp()


def alias(x):
    """Two outputs: a view of the input (an alias, not new memory) and a new tensor."""
    return x[1:], x + 1


FAIL = [False]


def k(x):
    """Raises while FAIL[0] is set: an exception inside warmup, record or replay."""
    y = x - 1
    if FAIL[0]:
        raise ValueError("k failed on purpose")
    return y * y


FUNCTIONS = {"f": f, "g": g, "pair": pair, "alias": alias, "k": k}


def plain(t: torch.Tensor) -> torch.Tensor:
    """A plain-tensor copy (eager references must not go through the tree's tensors)."""
    return t.detach().clone().as_subclass(torch.Tensor)


def leaves(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


@dataclass
class Held:
    t: torch.Tensor
    expected: torch.Tensor
    tree: bool  # an output of a warmup/record/execute (invalidated by mark_step), not eager/user data
    invalid: bool
    label: str


@st.composite
def programs(draw):
    """A short loop body, as a training or inference step: calls fed by fresh inputs or by an
    earlier call's first output; `keep` are the calls whose outputs the user keeps afterwards."""
    n = draw(st.integers(1, 4))
    ops = []
    for j in range(n):
        name = draw(st.sampled_from(["f", "g", "h", "pair", "alias", "k"]))
        src = draw(st.integers(-1, j - 1))  # -1: a fresh input
        ops.append((name, src))
    keep = draw(st.sets(st.integers(0, n - 1), max_size=2))
    return ops, sorted(keep)


class TreeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tree: Optional[cgviz.Tree] = None
        self.held: list[Held] = []
        self.w: Optional[torch.Tensor] = None
        self.calls = 0
        self.kept_last = 0

    # -- setup -------------------------------------------------------------------------------
    @initialize(level=st.sampled_from(["events", "full"]), seed=st.integers(0, 2**16))
    def setup(self, level: str, seed: int) -> None:
        # high limits: nothing falls back to eager by re-recording or too many shapes
        self.tree = cgviz.Tree("sim", trace=level, rerecord_limit=10_000, shape_limit=10_000)
        self.fns = {name: self.tree.wrap(fn, name=name) for name, fn in FUNCTIONS.items()}
        self.fns["h"] = self.tree.wrap(h, static=(1,), name="h")
        self.w = torch.randn(W_SIZE, generator=torch.Generator().manual_seed(seed))
        FAIL[0] = False

    # -- helpers -----------------------------------------------------------------------------
    def valid(self, shape=None) -> list[int]:
        return [
            i for i, e in enumerate(self.held)
            if not e.invalid and (shape is None or tuple(e.expected.shape) == shape)
        ]

    def pick_input(self, data, shape=None) -> tuple[torch.Tensor, bool]:
        """A held valid tensor (often a live tree output) or a fresh random one; and whether
        it is a tree output."""
        candidates = self.valid(shape)
        if candidates and data.draw(st.booleans(), label="use held"):
            e = self.held[candidates[data.draw(st.integers(0, len(candidates) - 1), label="held index")]]
            return e.t, e.tree
        n = shape[0] if shape is not None else data.draw(st.sampled_from(SIZES), label="size")
        seed = data.draw(st.integers(0, 2**16), label="seed")
        x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
        if data.draw(st.booleans(), label="hold input"):
            self.held.append(Held(x, plain(x), False, False, f"input #{self.calls}"))
        return x, False

    def last_kind(self) -> str:
        return self.tree.trace.steps[-1].kind

    def call(self, name: str, args: tuple, tree_args: tuple) -> None:
        """Call the wrapped `name` on `args`; `tree_args[i]`: args[i] is memory of a live tree output."""
        expected = leaves(FUNCTIONS.get(name, h)(*[plain(a) for a in args]))  # eager first
        out = leaves(self.fns[name](*args))
        step = self.tree.trace.steps[-1]
        kind = step.kind
        assert kind in ("warmup", "record", "execute", "eager"), kind
        event(f"call: {kind}")
        if kind == "record":
            # inputs that are live outputs of the path stay in place; all others are copied in
            node = self.tree.nodes[step.node]
            static = self.fns[name].static
            for i, is_tree in enumerate(tree_args):
                if i in static or args[i].numel() == 0:
                    continue
                if is_tree:
                    assert i in node.managed_addresses, f"input {i} is a live tree output but was not managed"
                else:
                    assert i in node.copy_inputs, f"input {i} is user memory but is not copied into the graph"
        assert len(out) == len(expected)
        for j, (got, exp) in enumerate(zip(out, expected)):
            assert torch.equal(got, exp), f"{name} output {j} ({kind}) differs from eager"
            # a tree output owns pool memory, unless the tree fell back to eager or it is empty;
            # an output that aliases an input shares that input's fate
            storage = got.untyped_storage()
            owned = kind != "eager" and storage.nbytes() > 0
            for a, is_tree in zip(args, tree_args):
                if storage.nbytes() > 0 and storage.data_ptr() == a.untyped_storage().data_ptr():
                    owned = is_tree
            self.held.append(Held(got, exp, owned, False, f"{name}#{self.calls}.{j} ({kind})"))
        self.calls += 1

    # -- rules -------------------------------------------------------------------------------
    @rule(name=st.sampled_from(["f", "g", "pair", "alias"]), data=st.data())
    def call_unary(self, name: str, data) -> None:
        x, is_tree = self.pick_input(data)
        self.call(name, (x,), (is_tree,))

    @rule(data=st.data())
    def call_static(self, data) -> None:
        x, is_tree = self.pick_input(data, shape=(W_SIZE,))
        self.call("h", (x, self.w), (is_tree, False))

    @rule(
        program=programs(),
        size=st.sampled_from(SIZES),
        repeats=st.integers(1, 4),
        between=st.sampled_from(["nothing", "mark_step", "drop_kept"]),
        seed=st.integers(0, 2**16),
    )
    def loop(self, program, size: int, repeats: int, between: str, seed: int) -> None:
        """Run a program several times, as a loop: the replays the tree is for."""
        ops, keep = program
        for r in range(repeats):
            if r:
                if between == "mark_step":
                    self.mark_step()
                elif between == "drop_kept":
                    self.held = self.held[: len(self.held) - self.kept_last]
                self.check_all()
            results = []  # (first output, is a tree output) of each op
            before = len(self.held)
            for j, (name, src) in enumerate(ops):
                if src < 0:
                    x = torch.randn(size, generator=torch.Generator().manual_seed(seed + 101 * r + j))
                    is_tree = False
                else:
                    x, is_tree = results[src]
                if name == "h" and tuple(x.shape) != (W_SIZE,):
                    name = "f"
                args, tree_args = ((x, self.w), (is_tree, False)) if name == "h" else ((x,), (is_tree,))
                n = len(self.held)
                self.call(name, args, tree_args)
                results.append((self.held[n].t, self.held[n].tree))
            # the loop body's temporaries die; the kept calls' outputs stay held
            new = self.held[before:]
            starts = [before]
            for j, (name, _) in enumerate(ops):
                starts.append(starts[-1] + {"pair": 3, "alias": 2}.get(name, 1))
            kept = [e for j in keep for e in self.held[starts[j] : starts[j + 1]]]
            del self.held[before:], new, results, x, args
            self.held.extend(kept)
            self.kept_last = len(kept)
            del kept

    def check_all(self) -> None:
        self.explain_works()
        self.held_values()
        self.live_outputs_on_current_path()
        self.liveness_matches_held()
        self.live_blocks_disjoint_and_owned()

    @rule(data=st.data(), fail=st.booleans())
    def call_failing(self, data, fail: bool) -> None:
        x, is_tree = self.pick_input(data)
        if not fail:
            self.call("k", (x,), (is_tree,))
            return
        FAIL[0] = True
        try:
            with pytest.raises(ValueError, match="on purpose"):
                self.fns["k"](x)
        finally:
            FAIL[0] = False
        assert self.last_kind() == "error"

    @precondition(lambda self: any(not e.invalid for e in self.held))
    @rule(data=st.data(), which=st.sampled_from(["even", "tail", "head"]))
    def take_view(self, data, which: str) -> None:
        """The user keeps a view of a held tensor: it keeps the output live and is invalidated with it."""
        candidates = self.valid()
        e = self.held[candidates[data.draw(st.integers(0, len(candidates) - 1), label="view of")]]
        view = {"even": lambda t: t[::2], "tail": lambda t: t[1:], "head": lambda t: t[:3]}[which]
        self.held.append(Held(view(e.t), view(e.expected), e.tree, False, f"{which} view of {e.label}"))

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def drop(self, data) -> None:
        i = data.draw(st.integers(0, len(self.held) - 1), label="drop index")
        del self.held[i]

    @rule()
    def mark_step(self) -> None:
        self.tree.mark_step()
        step = self.tree.trace.steps[-1]
        assert step.kind == "generation"
        newly = [e for e in self.held if e.tree and not e.invalid]
        for e in newly:
            e.invalid = True
        # the engine invalidated something exactly when the user still held tree outputs
        assert bool(step.invalidated) == bool(newly), (step.invalidated, [e.label for e in newly])

    @rule(fresh_values=st.booleans(), seed=st.integers(0, 2**16))
    def move_static(self, fresh_values: bool, seed: int) -> None:
        if fresh_values:
            self.w = torch.randn(W_SIZE, generator=torch.Generator().manual_seed(seed))
        else:
            self.w = self.w.clone()

    @rule()
    def update_static_in_place(self) -> None:
        self.w.mul_(0.5).add_(1.0)  # an optimizer step: same address, new values

    @precondition(lambda self: any(e.invalid for e in self.held))
    @rule(data=st.data(), how=st.sampled_from(["add", "sum", "clone", "index", "tolist", "f", "h"]))
    def touch_invalidated(self, data, how: str) -> None:
        candidates = [i for i, e in enumerate(self.held) if e.invalid]
        t = self.held[candidates[data.draw(st.integers(0, len(candidates) - 1), label="invalid index")]].t
        touch = {
            "add": lambda: t + 1,
            "sum": lambda: t.sum(),
            "clone": lambda: t.clone(),
            "index": lambda: t[0],
            "tolist": lambda: t.tolist(),
            "f": lambda: self.fns["f"](t),
            "h": lambda: self.fns["h"](t, self.w),
        }[how]
        with pytest.raises(RuntimeError, match=OVERWRITTEN):
            touch()
        if how in ("f", "h"):
            assert self.last_kind() == "error"

    def teardown(self) -> None:
        if self.tree is not None:
            for kind in sorted({s.kind for s in self.tree.trace.steps}):
                event(f"trace has a {kind} step")
            depth = max((len(n.path) for n in self.tree.nodes), default=0)
            event(f"deepest node: {'0' if not depth else '1' if depth == 1 else '2-4' if depth < 5 else '5+'}")
        FAIL[0] = False

    # -- invariants --------------------------------------------------------------------------
    @invariant()
    def held_values(self) -> None:
        for e in self.held:
            if e.invalid:
                with pytest.raises(RuntimeError, match=OVERWRITTEN):
                    e.t + 1
            else:
                assert torch.equal(e.t, e.expected), f"{e.label} was overwritten while held"

    @invariant()
    def explain_works(self) -> None:
        assert isinstance(self.tree.explain(), str)

    @invariant()
    def live_outputs_on_current_path(self) -> None:
        tree = self.tree
        path = set() if tree.current is None else {n.id for n in tree.current.path}
        for n in tree.nodes:
            for i in range(len(n.leaves)):
                if n.output_alive(i):
                    assert n.id in path, (
                        f"output {i} of node {n.id} is live but the current path is "
                        f"{sorted(path)} (current={None if tree.current is None else tree.current.id})"
                    )
        if tree.current is None:
            assert tree.state == "none"
        else:
            assert tree.state in ("warmup", "recording", "execution")

    def live_pool_outputs(self) -> list[tuple[int, int, int, int]]:
        """(address, nbytes, node, output) of the path's live outputs that own pool memory."""
        if self.tree.current is None:
            return []
        return [
            (n.leaves[i].address, n.leaves[i].nbytes, n.id, i)
            for n in self.tree.current.path
            for i in n.live_outputs()
            if n.leaves[i].alias_of is None and n.leaves[i].nbytes > 0
        ]

    @invariant()
    def liveness_matches_held(self) -> None:
        """The engine sees as live exactly what the user holds: a held output seen as dead
        could have its memory reused; an output seen as live after the user dropped it keeps
        the path from ending (and is invalidated again by the next mark_step)."""
        live = self.live_pool_outputs()
        storages = []  # (start, end) of the pool storage of each held tree output
        for e in self.held:
            if e.tree and not e.invalid:
                start = self.tree.backend.address(e.t) - e.t.storage_offset() * e.t.element_size()
                storages.append((start, start + e.t.untyped_storage().nbytes(), e.label))
                if e.t.numel() > 0:
                    address = self.tree.backend.address(e.t)
                    assert any(a <= address < a + nb for a, nb, _, _ in live), (
                        f"{e.label} at {address:#x} is held but no live output of the current path covers it"
                    )
        for address, _, node, out in live:
            assert any(start <= address < end for start, end, _ in storages), (
                f"output {out} of node {node} at {address:#x} is live, but the user holds nothing of it"
            )

    @invariant()
    def live_blocks_disjoint_and_owned(self) -> None:
        live = sorted(self.live_pool_outputs())
        for (a1, n1, node1, o1), (a2, n2, node2, o2) in zip(live, live[1:]):
            assert a1 + n1 <= a2, f"node {node1} output {o1} [{a1:#x}+{n1}] overlaps node {node2} output {o2} [{a2:#x}]"
        snap = self.tree.snapshot()
        blocks = {b.address: b for s in snap.segments for b in s.blocks}
        # A replay does not run the allocator (as on a GPU), so during execution the pool model
        # is stale until the next warmup/record restores a checkpoint; the snapshot must still
        # show each live output's memory as a block it owns.
        for address, nbytes, node, out in live:
            b = blocks.get(address)
            assert b is not None and b.allocated, f"node {node} output {out}: no allocated pool block at {address:#x}"
            assert b.size >= nbytes
            assert (b.node, b.output) == (node, out), f"block {address:#x} is owned by {b.owner}, not node {node} output {out}"
        for s in snap.segments:
            at = s.address
            for b in s.blocks:
                assert b.address == at, f"segment {s.address:#x}: gap or overlap at {at:#x}"
                at += b.size
            assert at == s.address + s.size


TreeMachine.TestCase.settings = settings(
    # CGVIZ_PROPERTY_EXAMPLES=5000 for a deeper search than CI's
    max_examples=int(os.environ.get("CGVIZ_PROPERTY_EXAMPLES", "300")),
    stateful_step_count=20,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestTreeMachine = TreeMachine.TestCase


# -- random programs: replays never overwrite what the user still holds ------------------------
def _f(x):
    return x * 2 + 1


def _g(x):
    return x.sin() * x


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("f"), st.integers(0, 3)),  # f on a fresh input (seed)
        st.tuples(st.just("g"), st.integers(0, 7)),  # g on a kept output (index)
        st.tuples(st.just("drop"), st.integers(0, 7)),
        st.tuples(st.just("mark_step"), st.just(0)),
    ),
    max_size=24,
)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_random_programs_equal_eager_and_never_overwrite_live_outputs(ops):
    tree = cgviz.Tree("sim", trace="events")
    F, G = tree.wrap(_f, name="f"), tree.wrap(_g, name="g")
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # (tree output, its eager value)
    invalidated: list[torch.Tensor] = []
    for op, k in ops:
        if op == "f":
            x = data(8, seed=k)
            kept.append((F(x), _f(x)))
        elif op == "g" and kept:
            src, expected = kept[k % len(kept)]
            kept.append((G(src), _g(expected)))
        elif op == "drop" and kept:
            kept.pop(k % len(kept))
        elif op == "mark_step":
            tree.mark_step()
            invalidated += [t for t, _ in kept]
            kept = []
        for t, expected in kept:
            assert torch.equal(t, expected)
    for t in invalidated:
        with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
            t + 1
    assert not steps_of(tree, "error") and not steps_of(tree, "eager")
