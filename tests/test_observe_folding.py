"""The step log both producers append to folds repeated decisions as they happen, exactly as
fold_repeats does after the fact."""

import random

import pytest

from cgviz.trace.fold import StepLog, fold_repeats, step_key
from cgviz.trace.model import Step


@pytest.mark.parametrize("given", ["step", "maker"])
def test_folding_log_matches_fold_repeats_on_random_sequences(given):
    """Steps given whole (trace level "full") or as makers, made only when kept ("events")."""
    rng = random.Random(1)
    for _ in range(300):
        seq = []
        pattern = [rng.choice("abc") for _ in range(rng.randint(1, 3))]
        for _ in range(rng.randint(1, 6)):
            seq += pattern * rng.randint(1, 5) + [rng.choice("abcd") for _ in range(rng.randint(0, 3))]
        folded, reference, keys = [], [], []
        log = StepLog(folded)
        for ch in seq:
            def make(ch=ch):
                return Step(index=0, kind="execute", reason=ch, generation=1, duration=1.0)

            log.add(("execute", None, None, None, (), ch), make() if given == "step" else make, 1.0)
            step = make()
            step.index = len(reference)
            reference.append(step)
            keys.append(step_key(step))
            fold_repeats(reference, keys)
        log.flush()
        assert [(s.reason, s.repeat, s.span) for s in folded] == [(s.reason, s.repeat, s.span) for s in reference]
        assert [s.index for s in folded] == list(range(len(folded)))
        assert sum(s.duration for s in folded) == len(seq)  # every decision's time is kept


def test_a_repetition_in_progress_is_made_when_it_breaks_off():
    steps = []
    log = StepLog(steps)
    for ch in "ababab" + "a" + "c":
        log.add((ch,), Step(index=0, kind="execute", reason=ch, generation=1), 0.0)
    assert [(s.reason, s.repeat, s.span) for s in steps] == [("a", 1, 1), ("b", 3, 2), ("a", 1, 1), ("c", 1, 1)]


@pytest.mark.parametrize("given", ["step", "maker"])
def test_steps_say_their_device_once_a_second_device_appears(given):
    """Trees on two devices (one observer, one log): once named, every step, those made before
    included, carries the device of the decisions it stands for, and a folded block never joins
    decisions of two devices."""
    rng = random.Random(7)
    for _ in range(200):
        seq = []
        for _ in range(rng.randint(1, 6)):
            pattern = [(rng.choice("ab"), rng.choice(("cuda:0", "cuda:1"))) for _ in range(rng.randint(1, 3))]
            seq += pattern * rng.randint(1, 4)
        name_at = rng.randint(0, len(seq))
        steps: list = []
        log = StepLog(steps)
        for i, (ch, device) in enumerate(seq):
            if i == name_at:
                log.name_devices()
            def make(ch=ch):
                return Step(index=0, kind="execute", reason=ch, generation=1)

            log.add(("execute", ch, device), make() if given == "step" else make, 1.0, device)
        if name_at == len(seq):
            log.name_devices()
        log.flush()
        expanded = []
        for s in steps:
            expanded.append((s.reason, s.device))
            if s.repeat > 1:
                block = expanded[-s.span:]
                expanded += block * (s.repeat - 1)
        assert expanded == seq, (seq, [(s.reason, s.device, s.repeat, s.span) for s in steps])
        assert len(log.devices) == len(steps)


def test_one_device_leaves_steps_without_a_device():
    steps: list = []
    log = StepLog(steps)
    for ch in "abab":
        log.add((ch, "cuda:0"), Step(index=0, kind="execute", reason=ch, generation=1), 0.0, "cuda:0")
    log.flush()
    assert [s.device for s in steps] == [None] * len(steps)


def counted_in_batches(rng: random.Random, seq: list[str], timed: bool, most: int) -> tuple[list, list]:
    """The steps of `seq` (one key per letter) added one at a time, and the same counted in bulk
    in batches of random sizes up to `most`, as catch-ups come: by (key, duration) notes through
    count_repetitions (`timed`), or by keys alone through count_key_repetitions."""
    one, bulk = StepLog([]), StepLog([])
    keys = [(ch,) for ch in seq]
    notes = [(key, 1.0 if timed else 0.0) for key in keys]

    def make(ch):
        return lambda: Step(index=0, kind="execute", reason=ch, generation=1)

    for (key, d), ch in zip(notes, seq):
        one.add(key, make(ch), d)
    start = 0
    while start < len(notes):
        end = start + rng.randint(1, most)
        i = start
        while i < min(end, len(notes)):
            i = bulk.count_repetitions(notes[:end], i) if timed else bulk.count_key_repetitions(keys[:end], i)
            if i < min(end, len(notes)):
                bulk.add(notes[i][0], make(seq[i]), notes[i][1])
                i += 1
        start = i
    one.flush()
    bulk.flush()
    return ([(s.reason, s.repeat, s.span, s.duration) for s in bulk.steps],
            [(s.reason, s.repeat, s.span, s.duration) for s in one.steps])


def test_counting_whole_repetitions_in_bulk_folds_as_adding_each_does():
    """StepLog.count_repetitions (the engine's batches of replay-loop notes at "events") takes
    only whole repetitions of the last block, and leaves the rest to add()."""
    rng = random.Random(3)
    for _ in range(300):
        seq = []
        for _ in range(rng.randint(1, 6)):
            pattern = [rng.choice("abc") for _ in range(rng.randint(1, 3))]
            seq += pattern * rng.randint(1, 6) + [rng.choice("abcd") for _ in range(rng.randint(0, 2))]
        bulk, one = counted_in_batches(rng, seq, timed=True, most=9)
        assert bulk == one


@pytest.mark.parametrize("seed", range(4))
def test_counting_whole_repetitions_by_key_folds_as_adding_each_does(seed):
    """StepLog.count_key_repetitions (the observer's untimed replay-loop events) compares a
    whole run at once: where the run breaks off, in a half block or in a block that differs
    only at its end, it counts up to there and leaves the rest to add()."""
    rng = random.Random(seed)
    for _ in range(300):
        seq = []
        for _ in range(rng.randint(1, 6)):
            pattern = [rng.choice("abc") for _ in range(rng.randint(1, 4))]
            seq += pattern * rng.randint(1, 40) + pattern[:rng.randint(0, len(pattern))] + \
                [rng.choice("abcd") for _ in range(rng.randint(0, 2))]
        bulk, one = counted_in_batches(rng, seq, timed=False, most=60)
        assert bulk == one
