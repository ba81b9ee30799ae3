"""Folding repeated steps: a replay loop of any length is stored as a few steps.

When the newest k steps (k <= MAX_SPAN) repeat the k before them, they fold into that
block's repeat count. Engines and observers fold as they record; both use these functions.
"""

from __future__ import annotations

from typing import Optional

from cgviz.trace.model import Step

MAX_SPAN = 8


def step_key(step: Step) -> tuple:
    """What makes two steps the same decision, generation numbers aside."""
    reason = None if step.kind == "generation" else step.reason
    return (step.kind, step.function, step.node, step.parent, tuple(map(tuple, step.invalidated)), reason)


def fold_repeats(steps: list[Step], keys: list[tuple]) -> Optional[Step]:
    """Fold the newest k steps into the identical block just before them, if there is one.

    `keys` holds `step_key` of each step. Returns the block's last step when folded.
    """
    n = len(steps)
    last = keys[-1] if keys else None
    for k in range(1, min(MAX_SPAN, n // 2) + 1):
        if keys[n - 1 - k] != last or keys[n - k :] != keys[n - 2 * k : n - k]:
            continue
        new, old = steps[n - k :], steps[n - 2 * k : n - k]
        end = old[-1]
        if any(s.repeat != 1 for s in new) or any(s.repeat != 1 or s.span != 1 for s in old[:-1]):
            continue
        if end.repeat != 1 and end.span != k:
            continue
        for kept, again in zip(old, new):
            kept.duration += again.duration
            if again.snapshot is not None:
                kept.snapshot = again.snapshot
        end.repeat += 1
        end.span = k
        del steps[n - k :], keys[n - k :]
        return end
    return None
