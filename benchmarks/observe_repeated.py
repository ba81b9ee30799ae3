"""Does observing leave the program slower once it stops? The unobserved loop of a
torch.compile(mode="reduce-overhead") model, timed before any observation and again after many
short ones (`cgviz.observe_torch` at "events" around a few calls each, started and stopped as a
cell magic or a benchmark round would).

Each checkpoint: the median over 30 chunks of the time per call (200 calls and one synchronize
each), the number of nodes in torch's tree, and the steps the observations made so far by kind
(a record there means torch recorded again while observed). `--control` makes the same calls at
the same checkpoints without observing: the loop's speed drifts on its own on some machines (on
an H200 host, a process that never observed went 76 -> 127 -> 79 us per call), so compare the two
runs, more than once, before blaming the observer. Prints one JSON object; `--out PATH` also
writes it. Needs a CUDA device.

usage: python benchmarks/observe_repeated.py [--observations N,N,...] [--calls-each C] [--collect] [--control] [--out PATH]
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
from collections import Counter

import torch
from _stats import emit, timed_us


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--observations", default="10,50,100,200,400", help="checkpoints, in observations made")
    parser.add_argument("--calls-each", type=int, default=5, help="calls inside each observation")
    parser.add_argument("--collect", action="store_true",
                        help="collect garbage after each observation (a stopped observer lives in "
                             "reference cycles until the collector runs)")
    parser.add_argument("--control", action="store_true",
                        help="make the same calls unobserved: how far the loop drifts without the observer")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/observe_repeated.py needs a CUDA device", file=sys.stderr)
        return 2
    checkpoints = sorted({int(n) for n in args.observations.split(",")})
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).cuda()
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(32, 64, device="cuda")

    def call() -> None:
        compiled(x)

    def unobserved_us() -> float:
        return round(statistics.median(timed_us(call, 200) for _ in range(30)), 2)

    with torch.no_grad():
        for _ in range(50):
            call()
        before_import = unobserved_us()
        from cgviz.observe import _torch_layout as layout
        from cgviz.observe.torch_compile import start_observing, stop_observing

        rows, kinds, managers = [], Counter(), []
        rows.append({"observations": 0, "us_per_call": unobserved_us(), "torch_tree_nodes": None})
        made = 0
        for target in checkpoints:
            while made < target:
                if args.control:
                    for _ in range(args.calls_each):
                        call()
                else:
                    observer = start_observing("events")
                    for _ in range(args.calls_each):
                        call()
                    stop_observing(observer)
                    managers = observer.managers or managers
                    kinds.update({k: v for k, v in observer.trace.counts().items() if v})
                    del observer
                made += 1
                if args.collect:
                    gc.collect()
            rows.append({"observations": made, "us_per_call": unobserved_us(),
                         "torch_tree_nodes": sum(len(layout.recorded_nodes(m)) for m in managers) if managers else None, "steps_so_far": dict(kinds)})
    base = rows[0]["us_per_call"]
    result = {
        "benchmark": "observe_repeated",
        "model": "Linear(64,64)-ReLU-Linear(64,64), batch 32, torch.compile(mode='reduce-overhead'), no_grad",
        "unit": "microseconds per call, unobserved (median of 30 chunks of 200 calls)",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "collected_after_each": args.collect,
        "control_without_observing": args.control,
        "before_importing_the_observer_us": before_import,
        "checkpoints": rows,
        "slowest_vs_before_observing": round(max(r["us_per_call"] for r in rows) / base, 3),
        "goal": "slowest_vs_before_observing <= 1.05",
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
