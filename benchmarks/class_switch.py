"""What the ways of wrapping torch's tree manager cost Python by themselves, on the CPU: calls of
a method that reads a dozen instance attributes and calls another method, as torch's manager does
on the replay path, on
- an instance never switched;
- an instance whose `__class__` was switched once to a subclass (no method replaced) and back,
  before any timing: CPython then keeps its attributes in a dict, for good;
- an instance of a class whose method is a pass-through wrapper on the class itself, as the
  observer's hooks are while nothing observes.

The variants run interleaved in many rounds of --chunk calls each, in an order that turns by one
each round; each figure is the median over rounds of the time per call (ns), each ratio the
median of the per-round ratios with the 95 % interval of that median. Prints one JSON object;
`--out PATH` also writes it. Needs no GPU.

usage: python benchmarks/class_switch.py [--rounds R] [--chunk N] [--out PATH]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run as a script from a checkout: import this checkout's cgviz
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _stats import emit, interleaved, summary  # noqa: E402  (the folder of the script is first on sys.path)


class Manager:
    """A stand-in for torch's tree manager: instance attributes read on every call."""

    def __init__(self) -> None:
        for i in range(20):
            setattr(self, f"a{i}", i)

    def helper(self, k: int) -> int:
        return self.a1 + k

    def run(self) -> int:
        t = 0
        for _ in range(10):
            t += self.a0 + self.a1 + self.a2 + self.a3 + self.a4 + self.a5 + self.a6 + self.a7 + self.a8 + self.a9
            t += self.helper(t) + self.helper(1) + self.helper(2)
            t += self.a10 + self.a11 + self.a12 + self.a13 + self.a14 + self.a15 + self.a16 + self.a17
        return t


def pass_through(original: Callable) -> Callable:
    def run(self, *args, **kwargs):
        return original(self, *args, **kwargs)
    return run


class Hooked(Manager):
    """The same class with its `run` wrapped on the class, once (its own copy, so that Manager's
    instances are untouched)."""


Hooked.run = pass_through(Manager.run)


def switched_once() -> Manager:
    manager = Manager()
    manager.__class__ = type(Manager.__name__, (Manager,), {"__slots__": ()})
    manager.__class__ = Manager
    return manager


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--chunk", type=int, default=20, help="calls per variant and round")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.chunk < 1:
        parser.error("--rounds and --chunk take a positive number")
    instances = {"never_switched": Manager(), "switched_once": switched_once(), "class_wrapped": Hooked()}

    def timed(manager: Manager) -> Callable[[], float]:
        def run() -> float:
            """ns per call of `chunk` calls."""
            manager.run()
            start = time.perf_counter_ns()
            for _ in range(args.chunk):
                manager.run()
            return (time.perf_counter_ns() - start) / args.chunk
        return run

    runs = {name: timed(manager) for name, manager in instances.items()}
    for run in runs.values():
        for _ in range(50):
            run()
    samples = interleaved(runs, args.rounds, seconds=float("inf"))
    figures = summary(samples, {f"{name}_vs_never_switched": (name, "never_switched")
                                for name in ("switched_once", "class_wrapped")})
    for ratio in figures["ratios"].values():
        del ratio["per_round"]
    result = {"benchmark": "class_switch", "unit": "ns per call", "python": platform.python_version(),
              "rounds": args.rounds, "chunk": args.chunk, "ns_per_call": figures}
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
