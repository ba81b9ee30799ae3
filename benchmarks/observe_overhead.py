"""Per-call cost of a torch.compile(mode="reduce-overhead") model with and without the observer.

Interleaved repetitions in one process; medians of (time for N calls + synchronize) / N, GC off
while timing. Prints one JSON object. Needs a CUDA device.

usage: python benchmarks/observe_overhead.py [--calls N] [--repeats R] [--out PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time

import torch


def timed(step, calls: int) -> float:
    torch.cuda.synchronize()
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
        return (time.perf_counter_ns() - start) / calls / 1000
    finally:
        gc.enable()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=9)
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

        samples = {"without_observer": [], "observer_events": []}
        for _ in range(args.repeats):
            samples["without_observer"].append(timed(call, args.calls))
            observer = start_observing("events")
            try:
                samples["observer_events"].append(timed(call, args.calls))
            finally:
                stop_observing(observer)
        steps = len(observer.trace.steps)
    med = {k: round(statistics.median(v), 2) for k, v in samples.items()}
    result = {
        "benchmark": "observe_overhead",
        "model": "Linear(64,64)-ReLU-Linear(64,64), batch 32, torch.compile(mode='reduce-overhead'), no_grad",
        "unit": "microseconds per call (median)",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "calls": args.calls,
        "repeats": args.repeats,
        "per_call_us": med,
        "observer_extra": round(med["observer_events"] / med["without_observer"] - 1, 4),
        "goal": "observer_extra <= 0.10",
        "steps_in_last_observed_run": steps,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
