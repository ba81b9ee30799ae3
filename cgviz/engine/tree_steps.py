"""The words of a tree's steps that take more than a line to put together (a new generation,
a recording), and the error step for an exception on its way to the caller."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Optional

from cgviz._torch import rules as R
from cgviz.engine.backend import describe_exception
from cgviz.engine.function import Variant
from cgviz.engine.node import Node
from cgviz.trace.reasons import MARK_STEP

if TYPE_CHECKING:
    from cgviz.engine.recorder import Recorder


def generation_reason(rules: R.Rules, old: int, new: int, cloned: list[tuple[int, int, int]],
                      invalidated: list[tuple[int, int]], pending: int) -> str:
    """Why mark_step() began generation `new`, and what became of the outputs still live."""
    reason = f"{MARK_STEP} generation {old} ends, generation {new} begins"
    if rules.generation_cloning is not None:
        reason += R.cloning_note(rules, cloned, invalidated)
    if invalidated:
        names = ", ".join(f"output {o} of node {n}" for n, o in invalidated)
        reason += f"; still-live {names} invalidated (clone outputs you keep across generations)"
    elif not cloned:
        reason += "; nothing live was invalidated"
    if pending:
        reason += f"; {pending} forward(s) still had a pending backward, whose saved outputs are now invalid"
    return reason


def record_reason(variant: Variant, parent: Optional[Node], mismatches: list[str],
                  live_before: list[tuple[Node, int, bool]], pending_backward: int) -> str:
    """Why `variant` was recorded under `parent`: the children that could not replay, or none."""
    where = "a new root (nothing on the path is live)" if parent is None else f"a new child of node {parent.id}"
    if mismatches:
        reason = "; ".join(mismatches) + f"; recording {where}"
    elif parent is None:
        reason = f"{variant.described} is warmed up and has no root graph yet; recording {where}"
    else:
        live = ", ".join(f"output {i} of node {n.id}" for n, i, alive in live_before if alive) or "nothing"
        reason = (f"no child for {variant.label} under node {parent.id}, the current node (the last graph run "
                  f"on the path; {live} live); recording {where}")
    if pending_backward and variant.function.mode == "forward" and parent is not None:
        reason += (
            f"; {pending_backward} forward(s) have a pending backward, whose saved outputs keep the "
            "path live: run the backward (or mark_step()) before the next forward to reach the replay path"
        )
    return reason


def note_error(recorder: "Recorder", label: str, exc: BaseException, start: float) -> None:
    """An error step for an exception on its way to the caller; recording it never replaces it."""
    try:
        described = describe_exception(exc)
        added = " No node was added." if described.endswith(".") else "; no node was added"
        recorder.step("error", f"{label} raised {described}{added}", function=label, start=start)
    except Exception as failure:  # the user's exception goes on unchanged
        warnings.warn(f"cgviz could not record the error step of {label}: {describe_exception(failure)}",
                      stacklevel=3)
