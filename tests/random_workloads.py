"""Random call sequences for a cgviz Tree, checked against plain (eager) PyTorch.

`generate(seed)` makes a Workload: 5 to 30 actions over a fixed set of functions

* `ew(x)`      elementwise;
* `mm(x, w)`   `x @ w + 1` with a static weight `w` (input 1);
* `multi(x)`   several outputs, one a view of another: `y, y[1:], y.sum()`;
* `alias(x)`   outputs that are views of the input: `x.t(), x[0]`;
* `boom(x)`    raises a ValueError on the calls the sequence chooses (warmup, record or
               replay, often right after other functions replayed);

and the actions: call a function on a fresh input (two shapes; contiguous, transposed or
stride-0 expanded) or on an output the user still holds; hold or drop each output; drop
held outputs later; pass an invalidated output back in; move the static weight (a clone
with the same values or new values); `mark_step()`. "Bursts" repeat a short loop body
with fresh inputs so that graphs are recorded and replayed.

`run_workload(workload, device)` runs it on `cgviz.Tree(device)` and, alongside, on plain
tensors (the oracle), and checks what docs/engine.md promises:

* every returned value equals eager, compared right after the call;
* a held output that was not invalidated keeps its value (after any later actions: the
  tree only replays a graph once its outputs are dead, and never reuses live memory);
* `mark_step()` invalidates every held tree output (and each view of one): touching one, or
  passing it to a tree function, raises the "overwritten by a subsequent run" RuntimeError;
  outputs that are views of the user's own inputs are not tree memory and stay valid;
* an exception raised by the function propagates unchanged (the very object raised), adds
  an `error` step, and later calls still give correct values. On cuda a replay does not
  run Python, so a call that would raise may instead replay the graph recorded for it;
* the pool, after every call and mark_step(): every held tree output lies in an allocated
  block owned by a node output (in the snapshot, and after a warmup or a recording in the
  allocator's own state too), and no allocated block is unowned; once the user drops
  everything nothing in the pool is allocated; once the tree is deleted it is
  garbage-collected and (cuda) torch.cuda.memory_reserved() is back to where it was.

A failure raises AssertionError naming the seed, the device, the failing action and the
whole action list, with a command that replays it.
"""

from __future__ import annotations

import gc
import random
import weakref
from typing import Any, NamedTuple, Optional

import torch

import cgviz

OVERWRITTEN = "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run"
D = 8  # the weight is D x D
SHAPES = ((4, D), (6, D))  # the two shapes of fresh inputs
LAYOUTS = ("contiguous", "transposed", "expanded")  # expanded: stride 0 in dimension 0

_RAISE: list = [None]  # the exception boom() raises while set


# -- the functions under test (pure: no in-place mutation of inputs, no host syncs) -----------
def ew(x):
    return (x * 2 + 1).relu()


def mm(x, w):
    return x @ w + 1


def multi(x):
    y = x * 2
    return y, y[1:], y.sum()


def alias(x):
    return x.t(), x[0]


def boom(x):
    y = x - 1
    err = _RAISE[0]
    if err is not None:
        raise err
    return y * y


FUNCTIONS = {"ew": ew, "mm": mm, "multi": multi, "alias": alias, "boom": boom}
STATIC = {"mm": (1,)}


def accepts(fn: str, shape: tuple) -> bool:
    """Can `fn` take an input of this shape? (Inputs never have zero elements.)"""
    if fn == "mm":
        return len(shape) in (1, 2) and shape[-1] == D
    if fn == "multi":
        return len(shape) >= 1 and shape[0] >= 2  # y[1:] is never empty
    if fn == "alias":
        return len(shape) in (1, 2)
    return True


# -- actions ------------------------------------------------------------------------------------
class Fresh(NamedTuple):
    """A new user tensor of this shape and layout, values from torch.Generator(seed)."""

    shape: tuple
    layout: str
    seed: int


class Use(NamedTuple):
    """The held output at this position of the held list (valid at that point)."""

    index: int


class Stale(NamedTuple):
    """The held output at this position, invalidated by an earlier mark_step()."""

    index: int


class Call(NamedTuple):
    fn: str
    src: Any  # Fresh | Use | Stale
    keep: tuple = ()  # per output: does the user hold it afterwards
    raises: bool = False  # boom only: the function raises on this call


class Drop(NamedTuple):
    index: int  # position in the held list


class MoveW(NamedTuple):
    new_values: bool  # False: a clone (same values, new address)
    seed: int


class MarkStep(NamedTuple):
    pass


class Workload(NamedTuple):
    seed: int
    trace: Optional[str]
    actions: tuple


def make_input(src: Fresh, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(src.seed)
    n, m = src.shape
    if src.layout == "contiguous":
        return torch.randn(n, m, generator=g).to(device)
    if src.layout == "transposed":
        return torch.randn(m, n, generator=g).to(device).t()
    if src.layout == "expanded":
        return torch.randn(m, generator=g).to(device).expand(n, m)
    raise ValueError(src.layout)


def make_weight(seed: int, device: torch.device) -> torch.Tensor:
    return torch.randn(D, D, generator=torch.Generator().manual_seed(seed)).to(device)


def _leaves(out) -> list:
    return list(out) if isinstance(out, tuple) else [out]


def _aliases(out: torch.Tensor, x: torch.Tensor) -> bool:
    return out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


_META: dict = {}


def _outputs_meta(fn: str, shape: tuple) -> list[tuple[tuple, bool]]:
    """(shape, is a view of the input) of each output of `fn` on an input of `shape`."""
    key = (fn, shape)
    if key not in _META:
        x = torch.zeros(shape)
        args = (x, torch.zeros(D, D)) if fn == "mm" else (x,)
        _META[key] = [(tuple(o.shape), _aliases(o, x)) for o in _leaves(FUNCTIONS[fn](*args))]
    return _META[key]


# -- the generator ------------------------------------------------------------------------------
def generate(seed: int, layouts: tuple = LAYOUTS) -> Workload:
    """A random workload; the same seed gives the same workload."""
    rng = random.Random(seed)
    trace = rng.choice((None, "events", "full"))
    length = rng.randint(5, 30)
    held: list[list] = []  # [shape, tree output?, invalidated?] like the runner's held list
    actions: list = []

    def fresh(shape=None, layout=None) -> Fresh:
        return Fresh(shape or rng.choice(SHAPES), layout or rng.choice(layouts), rng.randrange(2**31))

    def valid(fn: str) -> list[int]:
        return [i for i, (shape, _, invalid) in enumerate(held) if not invalid and accepts(fn, shape)]

    def call(fn: str, src, keep_p: float = 0.4, raises: bool = False, keep: Optional[tuple] = None) -> None:
        if isinstance(src, Fresh):
            shape, in_tree = src.shape, False
        else:
            shape, in_tree, _ = held[src.index]
        if raises or isinstance(src, Stale):
            actions.append(Call(fn, src, (), raises))
            return
        meta = _outputs_meta(fn, shape)
        if keep is None:
            keep = tuple(rng.random() < keep_p for _ in meta)
        actions.append(Call(fn, src, keep, False))
        for (out_shape, is_view), k in zip(meta, keep):
            if k:  # a view of the input shares its fate; anything else is tree memory
                held.append([out_shape, in_tree if is_view else True, False])

    def mark_step() -> None:
        actions.append(MarkStep())
        for entry in held:
            if entry[1]:
                entry[2] = True

    def drop(index: int) -> None:
        actions.append(Drop(index))
        del held[index]

    while len(actions) < length:
        r = rng.random()
        if r < 0.35:  # one call
            fn = rng.choice(tuple(FUNCTIONS))
            raises = fn == "boom" and rng.random() < 0.35
            stale = [i for i, e in enumerate(held) if e[2] and accepts(fn, e[0])]
            usable = valid(fn)
            if stale and rng.random() < 0.25:
                src = Stale(rng.choice(stale))
            elif usable and rng.random() < 0.55:
                src = Use(rng.choice(usable))
            else:
                src = fresh()
            call(fn, src, raises=raises)
        elif r < 0.65:  # a loop body run 2-4 times: warmup, record, then replays
            shape, layout = rng.choice(SHAPES), rng.choice(layouts)
            body = [rng.choice(tuple(FUNCTIONS))]  # then up to 2 calls, each fed output 0 of the one before
            in_shape = shape
            for _ in range(rng.choice((0, 0, 1, 2))):
                out_shape = _outputs_meta(body[-1], in_shape)[0][0]
                then = [fn for fn in FUNCTIONS if accepts(fn, out_shape)]
                if not then:
                    break
                body.append(rng.choice(then))
                in_shape = out_shape
            carry = rng.random() < 0.15  # the user keeps output 0 of the body's last call, every iteration
            keep_last = rng.random() < 0.6  # ... or the outputs of the last iteration's last call (often a replay)
            if rng.random() < 0.5:
                mark_step()
            reps = rng.randint(2, 4)
            for rep in range(reps):
                if rep and rng.random() < 0.2:
                    mark_step()
                first_held = len(held)
                in_shape, src = shape, fresh(shape, layout)
                for k, fn in enumerate(body):
                    n = len(_outputs_meta(fn, in_shape))
                    if k < len(body) - 1:
                        call(fn, src, keep=(True,) + (False,) * (n - 1))
                        in_shape, src = held[-1][0], Use(len(held) - 1)
                    elif keep_last and rep == reps - 1:
                        temporaries = len(held)
                        call(fn, src, keep=(True,) + tuple(rng.random() < 0.5 for _ in range(n - 1)))
                    else:
                        temporaries = len(held)
                        call(fn, src, keep=(carry,) + (False,) * (n - 1))
                for index in reversed(range(first_held, temporaries)):
                    drop(index)  # the iteration's temporaries: outputs that fed the next call
            if rng.random() < 0.6:  # an exception right after the replays: in a warmup, a record or a replay
                if "boom" in body and rng.random() < 0.5:
                    call("boom", fresh(shape, layout) if body[0] == "boom" else fresh(), raises=True)
                else:
                    call("boom", fresh(), raises=True)
                if rng.random() < 0.7:  # and the tree goes on
                    call(body[0], fresh(shape, layout))
        elif r < 0.77:
            if held:
                drop(rng.randrange(len(held)))
        elif r < 0.85:
            actions.append(MoveW(rng.random() < 0.5, rng.randrange(2**31)))
        elif r < 0.92:
            mark_step()
        else:  # boom raising on a held input or a fresh one
            usable = valid("boom")
            src = Use(rng.choice(usable)) if usable and rng.random() < 0.5 else fresh()
            call("boom", src, raises=True)
    return Workload(seed, trace, tuple(actions[:length]))


# -- the runner ---------------------------------------------------------------------------------
class _Entry:
    __slots__ = ("got", "expected", "tree", "invalid", "label")

    def __init__(self, got, expected, tree: bool, label: str) -> None:
        self.got = got  # the tensor the tree returned (the user's reference)
        self.expected = expected  # the eager value (plain tensor)
        self.tree = tree  # tree memory: invalidated by mark_step()
        self.invalid = False
        self.label = label


class _Runner:
    def __init__(self, workload: Workload, device: str) -> None:
        self.workload = workload
        self.tree = cgviz.Tree(device, trace=workload.trace, rerecord_limit=10**6, shape_limit=10**6)
        self.device = self.tree.device
        self.fns = {name: self.tree.wrap(fn, static=STATIC.get(name, ()), name=name) for name, fn in FUNCTIONS.items()}
        self.w = make_weight(workload.seed, self.device)
        self.held: list[_Entry] = []
        self.at: Optional[int] = None  # index of the action running

    # -- actions ----------------------------------------------------------------------------
    def run(self) -> None:
        for i, action in enumerate(self.workload.actions):
            self.at = i
            if isinstance(action, Call):
                self.call(i, action)
                self.check_pool(f"after {action.fn}")
            elif isinstance(action, Drop):
                del self.held[action.index]
            elif isinstance(action, MoveW):
                self.w = make_weight(action.seed, self.device) if action.new_values else self.w.clone()
            elif isinstance(action, MarkStep):
                self.mark_step()
            else:
                raise TypeError(f"unknown action {action!r}")
            self.check_held()
        self.at = None
        self.check_pool("at the end")

    def last_step(self):
        return self.tree.trace.steps[-1] if self.workload.trace is not None else None

    def call(self, i: int, a: Call) -> None:
        in_tree = False
        if isinstance(a.src, Fresh):
            x = x_eager = make_input(a.src, self.device)
        else:
            entry = self.held[a.src.index]
            assert entry.invalid == isinstance(a.src, Stale), f"generator and runner disagree on {entry.label}"
            x, x_eager, in_tree = entry.got, entry.expected, entry.tree
        args = (x, self.w) if a.fn == "mm" else (x,)
        if isinstance(a.src, Stale):
            self.call_stale(a, args, self.held[a.src.index].label)
            return
        raw = FUNCTIONS[a.fn](*((x_eager, self.w) if a.fn == "mm" else (x_eager,)))  # eager first
        expected = _leaves(raw)
        message = f"boom failed on purpose at action {i}"
        err = ValueError(message) if a.raises else None
        _RAISE[0] = err
        try:
            out = self.fns[a.fn](*args)
        except BaseException as caught:  # noqa: BLE001 - checked just below
            if caught is not err:
                raise AssertionError(f"{a.fn} raised {type(caught).__name__}: {caught}") from caught
            self.after_raise(a, err, message)
            return
        finally:
            _RAISE[0] = None
        step = self.last_step()
        kind = None if step is None else step.kind
        if err is not None:
            # only a cuda replay may skip the exception: the graph runs, not the Python function
            assert self.tree.backend.name == "cuda" and kind in (None, "execute"), (
                f"boom should have raised {err!r} but returned ({kind} step: {step and step.reason})"
            )
        if kind is not None:
            assert kind in ("warmup", "record", "execute"), f"{a.fn}: unexpected {kind} step: {step.reason}"
        got = _leaves(out)
        assert isinstance(out, tuple) == isinstance(raw, tuple) and len(got) == len(expected), (
            f"{a.fn} returned {len(got)} outputs, eager {len(expected)}"
        )
        for j, (g, e) in enumerate(zip(got, expected)):
            torch.testing.assert_close(
                g, e, msg=lambda m, j=j: f"{a.fn} output {j} ({kind or 'untraced'} call) differs from eager: {m}"
            )
        for j, keep in enumerate(a.keep):
            if keep:
                tree_memory = in_tree if _aliases(expected[j], x_eager) else True
                self.held.append(_Entry(got[j], expected[j], tree_memory, f"{a.fn}#{i}.{j} ({kind or 'untraced'})"))

    def after_raise(self, a: Call, err: BaseException, message: str) -> None:
        """`err` reached the caller (the very object raised): its message must be unchanged too."""
        try:
            assert err.args == (message,), f"the exception's message was changed: {err.args!r}"
            step = self.last_step()
            if step is not None:
                assert step.kind == "error" and step.function == a.fn, f"{step.kind} step after {a.fn} raised"
        finally:
            err.__traceback__ = None  # its frames hold the tree and the run's tensors

    def call_stale(self, a: Call, args: tuple, label: str) -> None:
        try:
            self.fns[a.fn](*args)
        except RuntimeError as exc:
            try:
                assert OVERWRITTEN in str(exc), f"passing invalidated {label} to {a.fn} raised: {exc}"
            finally:
                exc.__traceback__ = None
        else:
            raise AssertionError(f"passing invalidated {label} to {a.fn} did not raise")
        step = self.last_step()
        if step is not None:
            assert step.kind == "error", f"passing invalidated {label} to {a.fn} made a {step.kind} step"

    def mark_step(self) -> None:
        self.tree.mark_step()
        for e in self.held:
            if e.tree and not e.invalid:
                e.invalid = True
                self.expect_stale(e, "held across mark_step()")
        self.check_pool("after mark_step()")

    # -- checks -----------------------------------------------------------------------------
    @staticmethod
    def expect_stale(e: _Entry, why: str) -> None:
        try:
            e.got + 1
        except RuntimeError as exc:
            try:
                assert OVERWRITTEN in str(exc), f"touching {e.label} ({why}) raised another error: {exc}"
            finally:
                exc.__traceback__ = None
            return
        raise AssertionError(f"{e.label} was {why} but touching it did not raise")

    def check_held(self) -> None:
        for e in self.held:
            if not e.invalid:
                torch.testing.assert_close(
                    e.got, e.expected, msg=lambda m, e=e: f"held {e.label} no longer holds its value: {m}"
                )

    def check_invalidated(self) -> None:
        for e in self.held:
            if e.invalid:
                self.expect_stale(e, "invalidated")

    def check_pool(self, when: str) -> None:
        """Held tree outputs lie in allocated blocks owned by node outputs; nothing allocated is unowned.

        While replaying, the allocator's own view is stale by design (replays bypass it; the
        snapshot shows live outputs in blocks it calls free). After a warmup or a recording it
        is not: the checkpoint restore before them keeps the path's live outputs allocated, so
        then each held output must be in a block the allocator itself has allocated.
        """
        snap = self.tree.snapshot()
        blocks = [b for s in snap.segments for b in s.blocks]
        unowned = [f"{b.address:#x}+{b.size}" for b in blocks if b.allocated and b.node is None]
        assert not unowned, f"{when}: allocated pool blocks owned by no live output or input buffer: {unowned}"
        raw = None
        if snap.state in ("warmup", "recording"):
            raw = [b for s in self.tree.backend.segments() for b in s.blocks]
        for e in self.held:
            if e.tree and not e.invalid:
                address = self.tree.backend.address(e.got)
                inside = [b for b in blocks if b.address <= address < b.address + b.size]
                assert inside and inside[0].allocated and inside[0].node is not None, (
                    f"{when}: held {e.label} at {address:#x} is not in an allocated block owned by a node output "
                    f"(block: {inside and (inside[0].allocated, inside[0].owner)})"
                )
                if raw is not None:
                    inside = [b for b in raw if b.address <= address < b.address + b.size]
                    assert inside and inside[0].allocated, (
                        f"{when} ({snap.state}): held {e.label} at {address:#x} is in memory the pool allocator "
                        "considers free: a later allocation can overwrite it"
                    )

    def check_released(self) -> None:
        """Once the user holds nothing, nothing in the pool is allocated."""
        self.check_invalidated()  # (its loop variable must not keep an entry alive past the clear())
        self.held.clear()  # reference counting frees them: no gc.collect() needed, none done
        allocated = [
            f"{b.address:#x}+{b.size}" for s in self.tree.backend.segments() for b in s.blocks if b.allocated
        ]
        assert not allocated, f"the user holds nothing, but pool blocks are still allocated: {allocated}"


def describe(workload: Workload, device: str, at: Optional[int] = None) -> str:
    lines = [f"seed {workload.seed} on {device}, trace={workload.trace!r}, {len(workload.actions)} actions:"]
    for i, action in enumerate(workload.actions):
        lines.append(f"{'>>' if i == at else '  '} {i:2d}: {action!r}")
    lines.append(
        "replay: .venv/bin/python -c \"import sys; sys.path.insert(0, 'tests'); import random_workloads as r; "
        f"r.run_workload(r.generate({workload.seed}), '{device}')\""
    )
    return "\n".join(lines)


def _cuda_memory() -> tuple[int, int]:
    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:  # cuBLAS caches a workspace per stream, the tree's capture stream included
        clear()
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()


def run_workload(workload: Workload, device: str) -> None:
    """Run `workload` on cgviz.Tree(device) and check it (AssertionError describing it if not)."""
    baseline = _cuda_memory() if device.startswith("cuda") else None
    runner = _Runner(workload, device)
    tree = weakref.ref(runner.tree)
    try:
        try:
            runner.run()
            runner.check_released()
        finally:
            _RAISE[0] = None
    except Exception as exc:
        where = "" if runner.at is None else f" at action {runner.at}"
        raise AssertionError(
            f"{type(exc).__name__}{where}: {exc}\n{describe(workload, device, runner.at)}"
        ) from exc
    del runner
    gc.collect()
    assert tree() is None, f"the tree was not garbage-collected\n{describe(workload, device)}"
    if baseline is not None:
        after = _cuda_memory()
        assert after[1] == baseline[1], (
            f"torch.cuda.memory_reserved() is {after[1]} after the tree was deleted, {baseline[1]} before it was "
            f"made (memory_allocated(): {after[0]} after, {baseline[0]} before)\n{describe(workload, device)}"
        )
