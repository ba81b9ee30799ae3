"""Per-call cost of a torch.compile(mode="reduce-overhead") model with and without the observer.

Many short rounds in one process: in each, every variant times N calls and one synchronize after
a few untimed calls, in an order that turns by one each round, the garbage collector collected
once per round and off inside it (the observer's chunk also counts the time to make the events it
noted into steps); no round starts after --seconds. Each ratio is the median of
the per-round ratios, with quartiles and the 95 % interval of that median. Prints one JSON
object. Needs a CUDA device.

usage: python benchmarks/observe_overhead.py [--calls N] [--rounds R] [--seconds S] [--out PATH]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from typing import Callable

import torch
from _stats import emit, interleaved, medians, paired, warmed_us


def variants(call, calls: int, start_observing, stop_observing) -> tuple[dict[str, Callable[[], float]], list]:
    """Each variant times `calls` calls after 5 untimed ones (µs per call); the observer variant
    observes only its own chunk. The list collects each round's observer."""
    observers: list = []

    def chunk() -> float:
        return warmed_us(call, calls)

    def observed() -> float:
        observer = start_observing("events")
        try:
            us = chunk()
            start = time.perf_counter_ns()
            observer.catch_up()  # the events noted, made into steps: a long run pays it every 4,096
            return us + (time.perf_counter_ns() - start) / calls / 1000
        finally:
            stop_observing(observer)
            observers.append(observer)

    runs = {"without_observer": chunk, "observer_events": observed}
    return runs, observers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per variant and round")
    parser.add_argument("--rounds", type=int, default=2000, help="at most this many rounds")
    parser.add_argument("--seconds", type=float, default=60, help="no round starts after this")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/observe_overhead.py needs a CUDA device", file=sys.stderr)
        return 2
    from cgviz.observe.torch_compile import start_observing, stop_observing

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).cuda()
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(32, 64, device="cuda")
    with torch.no_grad():
        for _ in range(10):
            compiled(x)

        def call():
            compiled(x)

        runs, observers = variants(call, args.calls, start_observing, stop_observing)
        samples = interleaved(runs, args.rounds, args.seconds)
    kinds = observers[-1].trace.counts()
    if not kinds.get("execute"):
        raise RuntimeError(f"the observed loop made no execute step ({kinds})")
    base = samples["without_observer"]
    result = {
        "benchmark": "observe_overhead",
        "model": "Linear(64,64)-ReLU-Linear(64,64), batch 32, torch.compile(mode='reduce-overhead'), no_grad",
        "unit": "microseconds per call",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "calls": args.calls,
        "rounds": len(base),
        **medians(samples),
        "observer_events_vs_without": paired(samples["observer_events"], base),
        "goal": "observer_events_vs_without <= 1.10",
        "steps_in_last_observed_chunk": kinds,
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
