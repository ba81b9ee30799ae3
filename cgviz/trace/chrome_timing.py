"""When each decision of a trace happened, for the Chrome trace export (`cgviz.trace.chrome_trace`):
its start and duration in seconds, measured or estimated.

`Step.start` is `time.time()` (seconds since the Unix epoch). Where a step's start was not
measured, it is estimated (the export marks it: arg `"estimated": true`):

- Folded repeats (`folded="expand"`, the default) are expanded, one slice per occurrence
  (args `"folded": true`, `occurrence`, `repeat`). A folded block keeps only its first
  occurrence's start, so that one is measured; each later occurrence is laid out as the
  first one was, its steps lasting their average duration, and the occurrences are spread
  evenly (the same idle time before each) between the end of the first and the next step
  with a measured start. A steady loop comes out as it ran; an irregular one does not,
  which is why they are marked. With `folded="collapse"` (and above
  `max_slices` decisions) each folded step is one slice lasting its total duration, the
  block's steps one after another from its first start.
- Other steps without a start (replays torch.compile's observer notes without a clock) are
  spread the same way between their measured neighbours.
- A trace with no start at all (saved before starts were recorded) is laid out back to back
  from 0 by the steps' durations.

The events drawn at these times are `cgviz.trace.chrome_events`'.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

from cgviz.trace.model import Step, Trace


class Layout:
    """Each decision of the trace (folded repeats expanded) with its start and duration in
    seconds, relative to `ref` (the first measured start), measured or estimated.

    `idx`: the step each decision is; `occurrence`: which occurrence of its step it is (0 the
    first); `count`: how many decisions each step has; `times`: how many times each step
    happened; `t`, `dur`: each decision's start and duration; `estimated`: whether its start
    was estimated; `timed`: whether any start was measured; `earliest`: the earliest start;
    `measured`: how many decisions start at a measured start; `expanded`: folded repeats
    drawn one decision per occurrence."""

    def __init__(self, trace: Trace, expand: bool) -> None:
        self.trace = trace
        steps = trace.steps
        self.expanded = expand
        idx, groups = _decisions(steps, expand)
        count = [0] * len(steps)
        occurrence = []
        for i in idx:
            occurrence.append(count[i])
            count[i] += 1
        self.idx, self.occurrence, self.count = idx, occurrence, count
        self.times = trace.repeats()  # how many times each step happened
        starts = [s.start if s.start is not None and math.isfinite(s.start) else None for s in steps]
        if not expand:  # a block's steps follow its first one: only that one's start stands
            for end, step in enumerate(steps):
                if step.repeat > 1:
                    for i in range(max(0, end - step.span + 2), end + 1):
                        starts[i] = None
        known = [s for s in starts if s is not None]
        self.timed = bool(known)
        self.ref = known[0] if known else 0.0
        dur = [_seconds(steps[i].duration) / count[i] for i in idx]
        at: list[Optional[float]] = [
            None if k or starts[i] is None else starts[i] - self.ref for i, k in zip(idx, occurrence)
        ]
        self.estimated = [t is None for t in at]
        self.t, self.dur = _place(at, dur, groups)
        self.earliest = min(self.t, default=0.0)
        self.measured = sum(not e for e in self.estimated)


def _seconds(value: float) -> float:
    """A duration fit to draw: a negative or non-finite one (a trace built by hand) as 0."""
    return value if math.isfinite(value) and value > 0 else 0.0


def expanded_length(steps: list[Step]) -> int:
    """len(Trace.expanded()) without building it."""
    n = 0
    for step in steps:
        n += 1
        if step.repeat > 1:
            n += min(step.span, n) * (step.repeat - 1)
    return n


def _decisions(steps: list[Step], expand: bool) -> tuple[list[int], list[tuple[int, int, Optional[int]]]]:
    """The index of the step each decision is, in order (as Trace.expanded(), or one per step
    when not `expand`), and the groups drawn as one unit: (first decision, length, the first
    decision of the occurrence it repeats), or None there for a collapsed block."""
    out: list[int] = []
    groups: list[tuple[int, int, Optional[int]]] = []
    for i, step in enumerate(steps):
        out.append(i)
        if step.repeat <= 1:
            continue
        span = min(step.span, len(out))
        first = len(out) - span
        if not expand:
            groups.append((first, span, None))
            continue
        block = out[first:]
        for _ in range(step.repeat - 1):
            groups.append((len(out), span, first))
            out.extend(block)
    return out, groups


class _Unit(NamedTuple):
    """Decisions placed together: `offsets` from the unit's start, `length` from its start to
    its last end, `at` its measured start (None: to be estimated)."""

    first: int
    offsets: list[float]
    length: float
    at: Optional[float]


def _units(at: list[Optional[float]], dur: list[float], groups: list[tuple[int, int, Optional[int]]]) -> list[_Unit]:
    """Every decision in a unit: a later occurrence of a folded block is one, laid out as its first
    occurrence was measured (back to back where it was not); a collapsed block is one, its steps
    back to back from its first start; any other decision is a unit of its own."""
    starts = {g[0]: g for g in groups}
    units: list[_Unit] = []
    k, n = 0, len(at)
    while k < n:
        group = starts.get(k)
        if group is None:
            units.append(_Unit(k, [0.0], dur[k], at[k]))
            k += 1
            continue
        first, span, template = group
        model = [at[template + j] for j in range(span)] if template is not None else [None]
        if template is not None and all(a is not None for a in model):
            low = min(model)  # type: ignore[type-var]
            offsets = [a - low for a in model]  # type: ignore[operator]
        else:
            offsets, clock = [], 0.0
            for j in range(span):
                offsets.append(clock)
                clock += dur[first + j]
        length = max(o + dur[first + j] for j, o in enumerate(offsets))
        units.append(_Unit(first, offsets, length, at[first] if template is None else None))
        k += span
    return units


def _place(at: list[Optional[float]], dur: list[float], groups: list[tuple[int, int, Optional[int]]]
           ) -> tuple[list[float], list[float]]:
    """A start and a duration for every decision: measured where `at` has one, estimated between
    the measured ones around it where not.

    A run of units without a measured start between two units with one is spread over the time
    between the first one's end and the second one's start, the idle time shared evenly before
    each and after the last (a steady loop comes out as it ran); where they do not fit, they are
    shortened to fit. Before the first measured unit they end at it, back to back; after the
    last, and in a trace with none measured, they follow back to back.
    """
    units = _units(at, dur, groups)
    t_unit = [0.0] * len(units)
    scale = [1.0] * len(units)
    known = [u for u, unit in enumerate(units) if unit.at is not None]
    for u in known:
        t_unit[u] = units[u].at  # type: ignore[assignment]
    lengths = [unit.length for unit in units]
    if not known:
        _back_to_back(t_unit, lengths, 0, len(units), 0.0)
    else:
        clock = t_unit[known[0]]
        for u in range(known[0] - 1, -1, -1):  # the leading run, ending at the first measured start
            clock -= lengths[u]
            t_unit[u] = clock
        for p, q in zip(known, known[1:]):
            if q - p > 1:
                begin = min(t_unit[p] + lengths[p], t_unit[q])
                _spread(t_unit, lengths, scale, p + 1, q, begin, t_unit[q])
        last = known[-1]
        _back_to_back(t_unit, lengths, last + 1, len(units), t_unit[last] + lengths[last])
    t = [0.0] * len(at)
    d = list(dur)
    for unit, start, factor in zip(units, t_unit, scale):
        for j, offset in enumerate(unit.offsets):
            k = unit.first + j
            t[k] = start + offset * factor
            d[k] = dur[k] * factor
    return t, d


def _back_to_back(t: list[float], length: list[float], lo: int, hi: int, clock: float) -> None:
    for u in range(lo, hi):
        t[u] = clock
        clock += length[u]


def _spread(t: list[float], length: list[float], scale: list[float], lo: int, hi: int,
            begin: float, end: float) -> None:
    """Place units lo..hi-1 in [begin, end]: the spare time shared out before each and after the
    last; no spare time: shortened in proportion, back to back."""
    room = max(0.0, end - begin)
    busy = sum(length[lo:hi])
    factor = 1.0
    if busy <= room:
        gap = (room - busy) / (hi - lo + 1)
    else:
        factor, gap = room / busy, 0.0
    clock = begin
    for u in range(lo, hi):
        clock += gap
        t[u] = clock
        scale[u] = factor
        clock += length[u] * factor

