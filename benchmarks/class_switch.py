"""What the observer's way of wrapping costs Python by itself, on the CPU: calls of a method that
reads a dozen attributes and calls another method, as torch's manager does on the replay path,
on an instance never switched; switched every --chunk calls to a subclass made as the observer
makes one (`_hooks.subclass_of`) with no method replaced, and back; and switched to one whose
method is a pass-through wrapper, as the observer's are while nothing observes.

The variants run interleaved in many rounds; each figure is the median over rounds of the time
per call (ns). Prints one JSON object; `--out PATH` also writes it. Needs no GPU.

usage: python benchmarks/class_switch.py [--rounds R] [--chunk N] [--out PATH]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: import this checkout's cgviz
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _stats import emit  # noqa: E402  (the folder of the script is first on sys.path)

from cgviz.observe._hooks import subclass_of  # noqa: E402


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


def pass_through(original):
    def run(self, *args, **kwargs):
        return original(self, *args, **kwargs)
    return run


PLAIN = subclass_of(Manager, {})
WRAPPED = subclass_of(Manager, {"run": pass_through(Manager.run)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--chunk", type=int, default=22, help="calls between two switches (a training round's steps)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.chunk < 1:
        parser.error("--rounds and --chunk take a positive number")
    manager = Manager()

    def timed(cls: type) -> float:
        """ns per call of `chunk` calls with the instance's class `cls` (switched back after)."""
        manager.__class__ = cls
        manager.run()
        start = time.perf_counter_ns()
        for _ in range(args.chunk):
            manager.run()
        ns = (time.perf_counter_ns() - start) / args.chunk
        manager.__class__ = Manager
        return ns

    for _ in range(200):
        manager.run()
    samples: dict[str, list[float]] = {"never_switched": [], "switched_plain_subclass": [], "switched_wrapped": []}
    for _ in range(args.rounds):
        samples["never_switched"].append(timed(Manager))
        samples["switched_plain_subclass"].append(timed(PLAIN))
        samples["switched_wrapped"].append(timed(WRAPPED))
    medians = {k: round(statistics.median(v), 1) for k, v in samples.items()}
    result = {"benchmark": "class_switch", "unit": "ns per call (median over rounds)", "python": platform.python_version(),
              "rounds": args.rounds, "chunk": args.chunk, "ns_per_call": medians,
              "wrapper_ns": round(medians["switched_wrapped"] - medians["switched_plain_subclass"], 1)}
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
