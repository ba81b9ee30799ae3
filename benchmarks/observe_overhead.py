"""Per-call cost of a torch.compile(mode="reduce-overhead") model with and without the observer.

Many short rounds in one process: in each, every variant times N calls and one synchronize after
a few untimed calls, in an order that turns by one each round, the garbage collector collected
once per round and off inside it; no round starts after --seconds. Each ratio is the median of
the per-round ratios, with quartiles and the 95 % interval of that median. Prints one JSON
object. Needs a CUDA device.

usage: python benchmarks/observe_overhead.py [--calls N] [--rounds R] [--seconds S] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import time
from typing import Callable

import torch
from _stats import emit, interleaved, medians, paired, warmed_us


# What Python costs inside a compiled call: plain wrappers on the three manager methods a
# replay-loop call goes through, then with no-op calls or clock readings inside them. As the
# observer does, the probes switch the manager's class to a subclass (made once per probe) and
# back, rather than assign to torch's class at every round: from Python 3.13 that would use up
# the class's version tags within some fifty rounds and slow every variant after them.
PROBED_METHODS = ("clear_current_path_state_and_set_to_none", "execute_node")  # and _run (run_method)
PROBES = {"probe_3_wrappers": (0, False), "probe_3_wrappers_6_noop_calls": (2, False),
          "probe_3_wrappers_3_clock_reads": (0, True)}
_PROBE_CLASSES: dict[tuple[int, bool], type] = {}


def _noop() -> None:
    pass


def probe_class(noop_calls: int, clock: bool) -> type:
    """torch's manager class with the three methods wrapped plainly (made once per probe)."""
    made = _PROBE_CLASSES.get((noop_calls, clock))
    if made is not None:
        return made
    from cgviz.observe import _hooks
    from cgviz.observe import _torch_layout as layout

    manager = layout.manager_class()

    def wrap(original):
        def method(self, *args, **kwargs):
            if clock:
                time.perf_counter()
            for _ in range(noop_calls):
                _noop()
            return original(self, *args, **kwargs)
        return method

    names = (layout.run_method(manager), *PROBED_METHODS)
    made = _hooks.subclass_of(manager, {n: wrap(getattr(manager, n)) for n in names})
    _PROBE_CLASSES[(noop_calls, clock)] = made
    return made


@contextlib.contextmanager
def probe_wrappers(noop_calls: int, clock: bool):
    from cgviz.observe import _torch_layout as layout

    managers = layout.live_managers()
    if not managers:
        raise RuntimeError("no tree manager to probe: run the compiled model first")
    kinds = [type(m) for m in managers]
    for m in managers:
        m.__class__ = probe_class(noop_calls, clock)
    try:
        yield
    finally:
        for m, kind in zip(managers, kinds):
            m.__class__ = kind


def variants(call, calls: int, start_observing, stop_observing) -> tuple[dict[str, Callable[[], float]], list]:
    """Each variant times `calls` calls after 5 untimed ones (µs per call); the observer variant
    observes only its own chunk. The list collects each round's observer."""
    observers: list = []

    def chunk() -> float:
        return warmed_us(call, calls)

    def observed() -> float:
        observer = start_observing("events")
        try:
            return chunk()
        finally:
            stop_observing(observer)
            observers.append(observer)

    def probed(noop_calls: int, clock: bool) -> Callable[[], float]:
        def run() -> float:
            with probe_wrappers(noop_calls, clock):
                return chunk()
        return run

    runs = {"without_observer": chunk, "observer_events": observed}
    runs |= {name: probed(*probe) for name, probe in PROBES.items()}
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
        "probes_extra_us": {name: paired(samples[name], base, lambda a, b: a - b) for name in PROBES},
        "goal": "observer_events_vs_without <= 1.10",
        "steps_in_last_observed_chunk": kinds,
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
