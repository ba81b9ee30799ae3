"""Per-call cost of a torch.compile(mode="reduce-overhead") model with and without the observer.

Interleaved repetitions in one process; medians of (time for N calls + synchronize) / N, GC off
while timing. Prints one JSON object. Needs a CUDA device.

usage: python benchmarks/observe_overhead.py [--calls N] [--repeats R] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time

import torch
from _stats import per_call_us


# What Python costs inside a compiled call: plain wrappers on the three manager methods a
# replay-loop call goes through, then with no-op calls or clock readings inside them.
PROBED_METHODS = ("run", "clear_current_path_state_and_set_to_none", "execute_node")
PROBES = {"probe_3_wrappers": (0, False), "probe_3_wrappers_6_noop_calls": (2, False),
          "probe_3_wrappers_3_clock_reads": (0, True)}


def _noop() -> None:
    pass


@contextlib.contextmanager
def probe_wrappers(noop_calls: int, clock: bool):
    from torch._inductor.cudagraph_trees import CUDAGraphTreeManager as manager

    originals = {name: manager.__dict__[name] for name in PROBED_METHODS}

    def wrap(original):
        def method(self, *args):
            if clock:
                time.perf_counter()
            for _ in range(noop_calls):
                _noop()
            return original(self, *args)
        return method

    for name, original in originals.items():
        setattr(manager, name, wrap(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(manager, name, original)


def one_round(call, calls: int, start_observing, stop_observing) -> tuple[dict[str, float], object]:
    """Per-call times of every variant, one after the other; and the observer of this round."""
    times = {"without_observer": per_call_us(call, calls)}
    observer = start_observing("events")
    try:
        times["observer_events"] = per_call_us(call, calls)
    finally:
        stop_observing(observer)
    for name, (noop_calls, clock) in PROBES.items():
        with probe_wrappers(noop_calls, clock):
            times[name] = per_call_us(call, calls)
    return times, observer


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

        samples: dict[str, list[float]] = {}
        for round_ in range(args.repeats + 1):
            times, observer = one_round(call, args.calls, start_observing, stop_observing)
            if round_ > 0:  # the first round only warms the machine: a freshly started one drifts
                for name, value in times.items():
                    samples.setdefault(name, []).append(value)
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
        "probes_extra_us": {name: round(med[name] - med["without_observer"], 2) for name in PROBES},
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
