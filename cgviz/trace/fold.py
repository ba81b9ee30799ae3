"""Folding repeated steps: a replay loop of any length is stored as a few steps.

When the newest k steps (k <= MAX_SPAN) repeat the k before them, they fold into that
block's repeat count. Engines and observers fold as they record; both use these functions.
`tail_trace` cuts the newest decisions out of a folded trace (what a cell added).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Callable, Hashable, Optional, Union

from cgviz.trace.model import Snapshot, Step, Trace

MAX_SPAN = 8


def decision_key(kind: str, function: Optional[str], node: Optional[int], parent: Optional[int],
                 invalidated: Any, reason: Optional[str]) -> tuple:
    """What makes two decisions the same, from their parts (a producer keys a decision before,
    or without, making its Step): generation numbers and a generation's wording aside."""
    return (kind, function, node, parent, tuple(map(tuple, invalidated)), None if kind == "generation" else reason)


def step_key(step: Step) -> tuple:
    """What makes two steps the same decision, generation numbers aside."""
    return decision_key(step.kind, step.function, step.node, step.parent, step.invalidated, step.reason)


def device_key(key: tuple, device: Optional[str]) -> tuple:
    """A decision's key as the log keeps it: with its tree's device, where one is named."""
    return key if device is None else key + (device,)


StepOrMaker = Union[Step, Callable[[], Step]]


def repetition(block: list[Step]) -> tuple[dict[int, int], int]:
    """What one more repetition of a block changes in what a snapshot shows: the replay count
    of each node it replays (once per execute step) and the generation (one per generation step)."""
    replays = Counter(s.node for s in block if s.kind == "execute" and s.node is not None)
    return replays, sum(s.kind == "generation" for s in block)


def bring_forward(snapshot: Snapshot, change: tuple[dict[int, int], int]) -> None:
    """A kept snapshot brought one repetition of its block forward, in place (nothing else it
    shows changed: the producer's state said so)."""
    replays, generations = change
    snapshot.generation += generations
    for view in snapshot.nodes:
        more = replays.get(view.id)
        if more:
            view.replays += more


def brought_forward(snapshot: Snapshot, change: tuple[dict[int, int], int]) -> Snapshot:
    """`bring_forward` on a copy, with views of its own (a view is never shared by two
    snapshots: `bring_forward` changes views in place)."""
    copy = dataclasses.replace(snapshot, nodes=[dataclasses.replace(v) for v in snapshot.nodes])
    bring_forward(copy, change)
    return copy


class StepLog:
    """The steps a producer records, with repeated work folded as it happens (both the engine
    and the observer append here, keyed by `decision_key`/`step_key`).

    While a folded block repeats (a function called in a loop), a decision that matches the
    block's next step is only counted: a step given as a maker (a callable) is never made. The
    steps of a repetition in progress are kept only if it breaks off, or at `flush()`: `steps`
    is exact whenever no repetition is half done (after each call of a steady loop) and after
    `flush()`. A repetition that completes brings the block its durations and newest snapshots,
    as `fold_repeats` does.

    Snapshots (trace level "full") are paid per change, not per decision: a producer passes
    `snap` (the snapshot now) and `state`, a cheap fingerprint of everything a snapshot shows
    but the replay counts and the generation. A counted decision whose state equals the one its
    kept step's snapshot was taken in takes no snapshot: the kept one is brought forward
    (`bring_forward`). Any other decision takes its snapshot when it is made.
    """

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.keys: list[tuple] = []
        self.states: list[Optional[Hashable]] = []  # per step: the state its snapshot was taken in
        self.devices: list[Optional[str]] = []  # each step's tree's device, written into it once there are several
        self.named = False  # do the steps say their device (see name_devices)?
        # a repetition in progress: (key, step or maker, duration, device, state, snap)
        self.pending: list[tuple] = []
        self._change: tuple = (None, None)  # (a block's last step, what one repetition of it changes)

    def add(self, key: tuple, step: StepOrMaker, duration: float, device: Optional[str] = None, *,
            state: Optional[Hashable] = None, snap: Optional[Callable[[], Snapshot]] = None) -> Optional[Step]:
        """One decision; returns the step that now shows it (the block's last step when it
        folded or counted), or None while a repetition is half done."""
        key = device_key(key, device)
        steps = self.steps
        if steps and steps[-1].repeat > 1:
            end = steps[-1]
            k, i = end.span, len(self.pending)
            at = len(self.keys) - k + i
            if self.keys[at] == key:
                if snap is not None and (state is None or state != self.states[at]):
                    step = _made(step, duration, snap)  # what it shows changed: its snapshot now
                self.pending.append((key, step, duration, device, state, snap))
                if i + 1 < k:
                    return None
                self._repeated(k)
                return end
        self.flush()
        if snap is not None:
            step = _made(step, duration, snap)
        return self._append(key, step, duration, device, state)

    def _repeated(self, k: int) -> None:
        """The pending decisions completed one more repetition of the last block."""
        block = self.steps[-k:]
        first = len(self.keys) - k
        for j, (kept, (_, again, d, _, state, snap)) in enumerate(zip(block, self.pending)):
            kept.duration += d
            if isinstance(again, Step) and again.snapshot is not None:
                kept.snapshot = again.snapshot
                self.states[first + j] = state
            elif snap is not None and kept.snapshot is not None:
                bring_forward(kept.snapshot, self._repetition(block))
        block[-1].repeat += 1
        self.pending = []

    def count_repetitions(self, notes: list[tuple], i: int) -> int:
        """Count the whole repetitions of the last block that `notes[i:]` begin with; returns the
        index of the first note not counted. A note is a tuple (key, duration, ...), its key as
        the log keeps it (`device_key`). The block's snapshots (trace level "full", where a producer notes only
        decisions in the state their kept step's snapshot was taken in: see `expected`) are
        brought forward by the repetitions counted, as add() does one at a time."""
        k = self._repeating_span()
        if not k:
            return i
        block, keys = self.steps[-k:], self.keys[-k:]
        n, first = len(notes), i
        while i + k <= n:
            for j in range(k):
                if notes[i + j][0] != keys[j]:
                    break
            else:
                for j in range(k):
                    block[j].duration += notes[i + j][1]
                i += k
                continue
            break
        self._counted(block, (i - first) // k)
        return i

    def count_key_repetitions(self, keys: list[tuple], i: int) -> int:
        """`count_repetitions` for untimed decisions given by their keys alone (an observer's
        replay loop, noted raw): a steady loop's whole run is compared at once."""
        k = self._repeating_span()
        if not k:
            return i
        block = self.keys[-k:]
        times = (len(keys) - i) // k
        if keys[i:i + k * times] != block * times:  # the loop broke off: up to where it did
            times = 0
            while keys[i + k * times:i + k * (times + 1)] == block:
                times += 1
        self._counted(self.steps[-k:], times)
        return i + k * times

    def _repeating_span(self) -> int:
        """The length of the block that repeats at the log's end; 0 where none does (or one is
        half done)."""
        steps = self.steps
        return 0 if self.pending or not steps or steps[-1].repeat == 1 else steps[-1].span

    def _counted(self, block: list[Step], times: int) -> None:
        """`times` more repetitions of the last block: its count, and its snapshots brought forward."""
        if not times:
            return
        block[-1].repeat += times
        kept = [step.snapshot for step in block if step.snapshot is not None]
        if kept:
            replays, generations = self._repetition(block)
            change = ({node: count * times for node, count in replays.items()}, generations * times)
            for snapshot in kept:
                bring_forward(snapshot, change)

    @staticmethod
    def would_count(expect: Optional[list], key: tuple, state: Optional[Hashable]) -> bool:
        """Would the log only count this decision (`key` as the log keeps it), made in `state`,
        where `expect` (from `expected()`) says its repeating block stands? Then `expect` moves on
        to the block's next decision: a producer notes the decision instead of adding it."""
        if expect is None or state is None:
            return False
        keys, states, at = expect
        if keys[at] != key or states[at] != state:
            return False
        expect[2] = (at + 1) % len(keys)
        return True

    def expected(self) -> Optional[list]:
        """Where a repetition of the last block stands, for a producer that notes the decisions
        it would only count: [the block's keys, the states a decision must be in to take no
        snapshot, the position of the next decision in the block]; None when no block repeats."""
        steps = self.steps
        if not steps or steps[-1].repeat == 1:
            return None
        k = steps[-1].span
        states = self.states[-k:]
        for j, (_, step, _, _, state, _) in enumerate(self.pending):
            if isinstance(step, Step) and step.snapshot is not None:  # kept when its repetition completes
                states[j] = state
        return [self.keys[-k:], states, len(self.pending)]

    def _repetition(self, block: list[Step]) -> tuple[dict[int, int], int]:
        """`repetition(block)`, worked out once per block (a block's steps are fixed once it repeats)."""
        if self._change[0] is not block[-1]:
            self._change = (block[-1], repetition(block))
        return self._change[1]

    def name_devices(self) -> None:
        """Trees on a second device: from now on every step says its device, and so do those
        made before (a trace of one device says it once, in its meta)."""
        if not self.named:
            self.named = True
            for step, device in zip(self.steps, self.devices):
                step.device = device

    def flush(self) -> None:
        """Keep the decisions of a repetition that broke off (or is read half done) as steps."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        k = self.steps[-1].span
        first = len(self.keys) - k
        block = self.steps[-k:]
        change = self._repetition(block)
        kept = [(s.snapshot, self.states[first + j]) for j, s in enumerate(block)]
        for j, (key, step, duration, device, state, snap) in enumerate(pending):
            if snap is not None and not isinstance(step, Step):  # its snapshot: the kept one, one repetition on
                step = _made(step, duration, None)
                snapshot, state = kept[j]
                step.snapshot = None if snapshot is None else brought_forward(snapshot, change)
            self._append(key, step, duration, device, state)

    def _append(self, key: tuple, step: StepOrMaker, duration: float, device: Optional[str],
                state: Optional[Hashable] = None) -> Step:
        if not isinstance(step, Step):
            step = _made(step, duration, None)
        step.index = len(self.steps)
        if self.named:
            step.device = device
        self.steps.append(step)
        self.keys.append(key)
        self.states.append(state)
        self.devices.append(device)
        folded = fold_repeats(self.steps, self.keys, self.states)
        if folded is not None:
            del self.devices[len(self.steps):]
        return folded or step


def _made(step: StepOrMaker, duration: float, snap: Optional[Callable[[], Snapshot]]) -> Step:
    if not isinstance(step, Step):
        step = step()
        step.duration = duration
    if snap is not None and step.snapshot is None:
        step.snapshot = snap()
    return step


def fold_repeats(steps: list[Step], keys: list[tuple], states: Optional[list] = None) -> Optional[Step]:
    """Fold the newest k steps into the identical block just before them, if there is one.

    `keys` holds `step_key` of each step (and `states`, if given, what StepLog keeps per step:
    the kept steps take the states of the newer snapshots they take). Returns the block's last
    step when folded.
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
        for j, (kept, again) in enumerate(zip(old, new)):
            kept.duration += again.duration
            if again.snapshot is not None:
                kept.snapshot = again.snapshot
                if states is not None:
                    states[n - 2 * k + j] = states[n - k + j]
        end.repeat += 1
        end.span = k
        del steps[n - k :], keys[n - k :]
        if states is not None:
            del states[n - k :]
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
