"""Random call sequences on torch's own CUDA graph tree manager and on cgviz.Tree("cuda").

The workloads of tests/random_workloads.py (fresh, transposed and stride-0 inputs, outputs
held, dropped and fed back, views of inputs, a static weight that moves, mark_step()) run
through the harness of parity.py: torch's CUDAGraphTreeManager reached as compiled
code reaches it, then cgviz. After each call both must agree on

* its decision (warmup / record / execute / eager / error) and what it gave back: values equal
  to eager, or the "overwritten by a subsequent run" error;
* the checkpoint restores it made;
* which held outputs are stale, every other holding its value;

and at the end on the recorded graphs (function and parent).

Where torch.compile and cgviz differ on purpose (docs/engine.md), the comparison follows the
documented difference: outputs that are views of an input are made again from the caller's
tensor (`_functions`); a path that replayed needs no checkpoint restore in the next generation
(`_restores`); `comparable` says what is left out. A workload torch's own manager
cannot run (an internal error of torch's) is skipped, naming the error. `CGVIZ_PARITY_SEEDS=N`
runs N seeds instead of 100.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional

import pytest
import torch

from parity import DEV, CgvizTree, TorchTree, assert_parity, run_side
from parity import fresh_trees  # noqa: F401 (an autouse fixture)
from random_workloads import (
    FUNCTIONS, OVERWRITTEN, STATIC, Call, _aliases, Drop, Fresh, MarkStep, MoveW, Stale, Workload, _leaves, describe,
    generate, make_input, make_weight,
)

# what torch's manager left when it failed, kept: collecting it has aborted the process
_TORCH_FAILURES: list = []
SEEDS = range(int(os.environ.get("CGVIZ_PARITY_SEEDS", "100")))


def _outcome(run) -> tuple[str, object]:
    try:
        return "returned", run()
    except RuntimeError as exc:
        if OVERWRITTEN in str(exc):
            return "stale input", None
        raise


class _Held(NamedTuple):
    tensor: Optional[torch.Tensor]  # what the side returned (None: let go at a mark_step())
    expected: Optional[torch.Tensor]  # the eager value
    callers: bool  # (a view of) the caller's own input in eager: not tree memory


def _state(T, h: _Held) -> str:
    if h.tensor is None:
        return "let go at mark_step()"
    if T.is_stale(h.tensor):
        return "stale"
    return "holds its value" if torch.allclose(h.tensor, h.expected) else "WRONG VALUE"


def _restores(T, before: int, first_of_generation: bool) -> str:
    """Checkpoint restores in one call. torch restores the allocator when a path that replayed
    warms up or records in the next generation; cgviz ended that path at mark_step() and has
    nothing to restore (documented: invalidation at mark_step): the first call of a generation
    may restore once on either side."""
    n = T.checkpoints() - before
    return "none or one" if first_of_generation and n <= 1 else str(n)


def _functions(T) -> dict:
    """The workload's functions on one side. torch.compile never returns a view of a graph input
    from the compiled graph: AOTAutograd makes it again from the caller's tensor after the graph
    ran. So on torch's side `alias`'s graph returns nothing and its views are made of the input,
    as cgviz makes them (docs/engine.md: outputs that alias a non-static input)."""
    fns = {name: T.wrap(fn, static=STATIC.get(name, ()), name=name) for name, fn in FUNCTIONS.items() if name != "alias"}
    if T.kind == "cgviz":
        fns["alias"] = T.wrap(FUNCTIONS["alias"], name="alias")
        return fns
    graph = T.wrap(lambda x: (), name="alias")

    def alias(x):
        graph(x)
        return FUNCTIONS["alias"](x)

    fns["alias"] = alias
    return fns


def _check_values(T, label: str, got: list, expected: list) -> None:
    """(its own frame: no loop variable keeps an output alive after it)"""
    assert len(got) == len(expected), f"{T.kind}: {label}: {len(got)} outputs, eager {len(expected)}"
    for j, (g, e) in enumerate(zip(got, expected)):
        T.check(f"{label} output {j}", g, e)


def as_side_workload(workload: Workload):
    """The workload as the harness runs it on one side, noting what each call observed."""

    def work(T) -> None:
        fns = _functions(T)
        w = make_weight(workload.seed, DEV)
        held: list[_Held] = []
        first_of_generation = False
        for i, a in enumerate(workload.actions):
            if isinstance(a, Call):
                if isinstance(a.src, Fresh):
                    x = x_eager = make_input(a.src, DEV)
                    callers = True
                else:
                    x, x_eager, callers = held[a.src.index]
                expected = _leaves(FUNCTIONS[a.fn](*((x_eager, w) if a.fn == "mm" else (x_eager,))))
                before = T.checkpoints()
                what, out = _outcome(lambda: fns[a.fn](*((x, w) if a.fn == "mm" else (x,))))
                T.note(f"{i}: {a.fn}", what)
                T.note(f"{i}: checkpoint restores", _restores(T, before, first_of_generation))
                first_of_generation = False
                if out is not None:
                    got = _leaves(out)
                    _check_values(T, f"action {i}: {a.fn}", got, expected)
                    held.extend(_Held(got[j], expected[j], callers and _aliases(expected[j], x_eager))
                                for j, keep in enumerate(a.keep) if keep)
                    del out, got
                del x, x_eager  # the caller lets go of its arguments, as a training loop does
                T.note(f"{i}: held", tuple(_state(T, h) for h in held))
            elif isinstance(a, Drop):
                del held[a.index]
            elif isinstance(a, MoveW):
                w = make_weight(a.seed, DEV) if a.new_values else w.clone()
            elif isinstance(a, MarkStep):
                # the user lets go of the step's outputs (see `comparable`); the generator still
                # counts them, and uses none of them again
                held = [h if h.callers else _Held(None, None, False) for h in held]
                T.mark_step()
                first_of_generation = True
        held.clear()

    return work


def comparable(workload: Workload) -> Workload:
    """The workload without what torch and cgviz do differently on purpose or torch cannot do.

    - Raising calls are made ordinary ones (they hold no output either way): torch 2.11's
      manager can abort the process after a function raised while it recorded (seen: "Fatal
      Python error: Aborted" while collecting its graphs).
    - Calls on an output of an ended generation are left out (they hold none either): torch
      takes it as an input until its next call invalidates it.
    - At each mark_step() the user lets go of the outputs held (`as_side_workload`): cgviz
      invalidates them then; torch never invalidates a replayed one and counts it live, so a
      function first called in the new generation warms up while it is held (docs/engine.md).

    Those behaviours are covered by the test_torch_parity*.py ports and the cgviz-only random
    sequences."""
    actions = tuple(a._replace(raises=False) if isinstance(a, Call) else a
                    for a in workload.actions if not (isinstance(a, Call) and isinstance(a.src, Stale)))
    return workload._replace(actions=actions)


def _check(workload: Workload) -> None:
    try:
        t = run_side(TorchTree, as_side_workload(workload))
    except Exception as exc:  # noqa: BLE001 - torch's own manager failing is not cgviz's to answer
        _TORCH_FAILURES.append(exc)
        why = f"{type(exc).__name__}: {str(exc)[:300]}"
    else:
        why = None
    if why is not None:
        pytest.skip(f"torch {torch.__version__}'s own manager fails on seed {workload.seed}: {why}")
    try:
        c = run_side(CgvizTree, as_side_workload(workload), shape_limit=10**6)  # torch compiles every new signature
        assert_parity(t, c, checkpoints=False)  # compared call by call (_restores)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{describe(workload, 'cuda')}") from None


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sequence_same_as_torch(seed):
    _check(comparable(generate(seed)))
