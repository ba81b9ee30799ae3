"""Folding repeated steps: a replay loop of any length is stored as a few steps.

When the newest k steps (k <= MAX_SPAN) repeat the k before them, they fold into that
block's repeat count. Engines and observers fold as they record; both use these functions.
`tail_trace` cuts the newest decisions out of a folded trace (what a cell added).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from cgviz.trace.model import Step, Trace

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


def tail_trace(trace: Trace, n: int) -> Trace:
    """The last `n` decisions of `trace` (what `trace.expanded()[-n:]` lists) as a Trace of
    their own, without unrolling anything: the stored steps they span are copied with their
    repeats, and the oldest repeated block is cut to the repetitions that are new (new
    decisions may have folded into a block stored before them). Copies share snapshots;
    durations are split by repetition."""
    groups: list[list] = []  # newest first
    need = n
    i = len(trace.steps) - 1
    while i >= 0 and need > 0:
        end = trace.steps[i]
        span = min(end.span, i + 1) if end.repeat > 1 else 1
        block = trace.steps[i - span + 1 : i + 1]
        size = span * end.repeat
        if size <= need:
            group = [dataclasses.replace(step) for step in block]
        else:  # the last `need` decisions of the block: a partial repetition, then q whole ones
            q, rem = divmod(need, span)

            def part(step: Any, times: int) -> Any:
                return dataclasses.replace(step, repeat=1, span=1, duration=step.duration * times / end.repeat)

            group = [part(step, 1) for step in block[span - rem :]] if rem else []
            if q:
                body = [part(step, q) for step in block]
                if q > 1:
                    body[-1].repeat, body[-1].span = q, span
                group += body
        groups.append(group)
        need -= min(size, need)
        i -= span
    out = Trace(meta=dict(trace.meta))
    for group in reversed(groups):
        for step in group:
            step.index = len(out.steps)
            out.steps.append(step)
    return out
