"""What the benchmarks share: the hand-written copy + replay the GPU ones measure against, timing
a loop, quartiles, paired ratios, writing the JSON.

Imported by the scripts beside it (run as `python benchmarks/<name>.py`, which puts this folder
first on sys.path)."""

from __future__ import annotations

import gc
import json
import random
import statistics
import time
from typing import Any, Callable, Optional


def copy_and_replay(fn: Callable[[Any], object], x: Any, warmups: int = 1) -> tuple[Callable[[], None], Any]:
    """`fn` captured by hand into one CUDA graph on a copy of `x` (warmed up on a side stream
    first), and a call that copies `x` into that input and replays the graph: the floor every
    replay path is measured against. Returns (that call, the torch.cuda.CUDAGraph)."""
    import torch

    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(static_x)

    def copy_replay() -> None:
        static_x.copy_(x)
        graph.replay()

    return copy_replay, graph


def timed_us(step: Callable[[], object], calls: int) -> float:
    """µs per call of `calls` calls and one synchronize (the caller decides about the garbage
    collector)."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter_ns()
    for _ in range(calls):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - start) / calls / 1000


def warmed_us(step: Callable[[], object], calls: int, warm: int = 5) -> float:
    """`timed_us` after `warm` untimed calls (a round's chunk; the caller keeps the garbage
    collector off)."""
    for _ in range(warm):
        step()
    return timed_us(step, calls)


def per_call_us(step: Callable[[], object], calls: int) -> float:
    """`timed_us` with the garbage collector collected first and off while timing (as timeit)."""
    gc.collect()
    gc.disable()
    try:
        return timed_us(step, calls)
    finally:
        gc.enable()


def rotated(names: list[str], r: int) -> list[str]:
    """The variants in round r's order: each starts a round in turn, so that none always runs
    right after the same other one."""
    k = r % len(names)
    return names[k:] + names[:k]


def interleaved(runs: dict[str, Callable[[], float]], max_rounds: int, seconds: float) -> dict[str, list[float]]:
    """Each variant's figure from each round (a run returns it). The variants run in turn, in an
    order that turns by one each round, with one garbage collection per round and none inside
    it; the first round always runs, no other starts after `seconds`. Many short rounds: a ratio paired within a round is not
    moved by the machine's slower drifts."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    deadline = time.monotonic() + seconds
    for r in range(max_rounds):
        if r and time.monotonic() >= deadline:
            break
        gc.collect()
        gc.disable()
        try:
            for name in rotated(list(runs), r):
                samples[name].append(runs[name]())
        finally:
            gc.enable()
    return samples


def quartiles(xs: list[float], digits: int = 3) -> list[float]:
    q = statistics.quantiles(xs, n=4)
    return [round(q[0], digits), round(q[2], digits)]


def paired(a: list[float], b: list[float], combine: Callable[[float, float], float] = lambda x, y: x / y) -> dict:
    """a against b in each round both ran in (a ratio by default): the median, the quartiles,
    the 95 % confidence interval of the median (bootstrap) and the per-round values."""
    per_round = [combine(x, y) for x, y in zip(a, b)]
    return {"median": round(statistics.median(per_round), 3), "quartiles": quartiles(per_round),
            "ci95": median_interval(per_round), "per_round": [round(v, 4) for v in per_round]}


def median_interval(xs: list[float], resamples: int = 4000) -> list[float]:
    """The 95 % bootstrap confidence interval of the median of `xs`: how sure the median is (a
    ratio whose interval lies within 0.99 – 1.01 is told apart from a 1 % cost). The resampling
    is seeded: the same samples give the same interval."""
    rng = random.Random(0)
    n = len(xs)
    medians_ = sorted(statistics.median(rng.choices(xs, k=n)) for _ in range(resamples))
    return [round(medians_[int(0.025 * resamples)], 3), round(medians_[int(0.975 * resamples) - 1], 3)]


def medians(samples: dict[str, list[float]]) -> dict:
    """Each variant's median and quartiles."""
    return {"median": {k: round(statistics.median(v), 3) for k, v in samples.items()},
            "quartiles": {k: quartiles(v) for k, v in samples.items()}}


def summary(samples: dict[str, list[float]], ratios: dict[str, tuple[str, str]]) -> dict:
    """Medians and quartiles, and each named ratio paired round by round."""
    return medians(samples) | {"ratios": {name: paired(samples[a], samples[b]) for name, (a, b) in ratios.items()}}


def emit(result: dict, out: Optional[str]) -> None:
    """Print the result as JSON, and write it to `out` where given."""
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
