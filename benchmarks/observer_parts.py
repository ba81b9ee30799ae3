"""Where the observer's cost on a training loop lies, on the GPU: the resnet18 training loop of
`resnet_levels.py`, steady state, with parts of an observation at "events" in place one at a time.

Variants, each timing a chunk of steps inside its context, interleaved in rounds as in
`resnet_levels.py` (the hooks on torch's classes are in before the first round):
- no_observer;
- unreached: an observation started and stopped around the chunk, its observer taken out of the
  active list at once, so nothing reaches it;
- installed: what starting an observation puts in place (the skip logger), with no observer;
- idle_observer: an active observer whose event methods do nothing and that lets `_run` pass
  straight on;
- events_no_work: the observer at "events" with its replay-loop methods doing nothing;
- events: `cgviz.observe_torch(trace="events")`.

With --full-parts, also `"full"` and `"full"` with one part of its state read made free, for
measuring only (their traces are not correct): full_no_reads takes every output as dead without
reading it (what the reads find in this loop's steady steps), full_const_state makes the state a
constant (the nodes not walked either).

With --count-calls, also the calls a step makes from Python (Python functions, and C functions
called from Python), on every thread, counted with a profiler for ten steps of no_observer,
events_no_work and events, and the functions whose counts differ (Python 3.12+). With
--hook-times, also the time a step spends in each of the observer's hooks on torch's manager,
timed in place (torch's own method left out): with no observer, at "events" and at "full". Prints one JSON
object; `--out PATH` also writes it. Needs a CUDA device and torchvision.

usage: python benchmarks/observer_parts.py [--chunk N] [--rounds R] [--seconds S] [--full-parts]
       [--count-calls] [--hook-times] [--out PATH]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import platform
import statistics
import sys
import threading
import time
from typing import Any, Callable, Iterator

import torch
from _stats import emit, interleaved, summary
from resnet_levels import events_no_work, hooks_replaced, training_variants

PARTS = ("unreached", "installed", "idle_observer", "events_no_work", "events")
FULL_PARTS = ("full", "full_no_reads", "full_const_state")


@contextlib.contextmanager
def unreached() -> Iterator[None]:
    from cgviz.observe import _hooks
    from cgviz.observe.torch_compile import start_observing, stop_observing

    observer = start_observing("events")
    _hooks.ACTIVE.remove(observer)
    try:
        yield
    finally:
        _hooks.ACTIVE.append(observer)
        stop_observing(observer)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    from cgviz.observe import _hooks

    _hooks.install()
    try:
        yield
    finally:
        _hooks.uninstall()


class _Idle:
    """An active observer that takes the replay loop's events and does nothing with them."""

    depth = 1  # as if inside torch's run(): the _run hook passes the call straight on
    level = "events"

    def replayed(self, *args: Any) -> None:
        pass

    def generation_began(self, *args: Any) -> None:
        pass

    def path_ended(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def idle_observer() -> Iterator[None]:
    from cgviz.observe import _hooks

    _hooks.ACTIVE.append(_Idle())
    try:
        yield
    finally:
        _hooks.ACTIVE.pop()


@contextlib.contextmanager
def full_without(part: str) -> Iterator[None]:
    """An observation at "full" with one part made free (see the module): "reads" or "state"."""
    import cgviz
    from cgviz.observe import _torch_layout as layout
    from cgviz.observe.tree_snapshots import TreeSnapshots

    owner, name, free = {"reads": (layout, "live_outputs", lambda node, found: []),
                         "state": (TreeSnapshots, "state", lambda self, manager, invalidated: ("steady",))}[part]
    kept = vars(owner)[name]
    setattr(owner, name, free)
    try:
        with cgviz.observe_torch(trace="full"):
            yield
    finally:
        setattr(owner, name, kept)


def count_calls(run: Callable[[], None]) -> collections.Counter:
    """How often each function was called, on every thread, while `run()` ran: keys
    (file or "C", first line, name). Needs Python 3.12 (threading.setprofile_all_threads)."""
    counts: collections.Counter = collections.Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            counts[(code.co_filename, code.co_firstlineno, code.co_qualname)] += 1
        elif event == "c_call":
            counts[("C", 0, getattr(arg, "__qualname__", repr(arg)))] += 1

    threading.setprofile_all_threads(profile)
    try:
        run()
    finally:
        threading.setprofile_all_threads(None)
    return counts


def calls_per_step(train: Callable[[int], None], watching: dict[str, Callable[[], Any]], steps: int = 10) -> dict:
    """Each variant's calls per step, and the functions whose count differs from no_observer's."""
    def counted(context: Callable[[], Any]) -> dict[tuple, float]:
        with context():
            train(2)
            found = count_calls(lambda: (train(steps), torch.cuda.synchronize()))
        return {key: n / steps for key, n in found.items()}

    counts = {name: counted(context) for name, context in watching.items()}
    base = counts["no_observer"]
    out: dict[str, Any] = {"steps": steps, "per_step": {name: round(sum(c.values()), 1) for name, c in counts.items()}}
    for name, found in counts.items():
        if name != "no_observer":
            diff = {key: found.get(key, 0) - base.get(key, 0) for key in found.keys() | base.keys()}
            out[f"{name}_minus_no_observer"] = sorted(
                ([f"{file}:{line} {fn}", round(d, 1)] for (file, line, fn), d in diff.items() if abs(d) >= 0.5),
                key=lambda row: -abs(row[1]))
    return out


def hook_times(train: Callable[[int], None], watching: dict[str, Callable[[], Any]], steps: int = 100,
               repeats: int = 5) -> dict:
    """µs per step spent in the observer's hooks on torch's manager, torch's own method left out,
    by method, timed in place in the loop. Each hook is made again around a timed stand-in of
    torch's method and timed from outside: its time less its stand-in's is the hook's own. The
    same with no hook between gives what the two clocks cost by themselves, taken off. Medians
    of `repeats` runs of `steps` steps; torch's class is assigned to at each run and put back."""
    from cgviz.observe import _hooks
    from cgviz.observe import _torch_layout as layout

    makers = {name: make for _, name, make in _hooks.manager_hooks(layout.manager_class())}
    clock = time.perf_counter_ns

    def own_ns(hooked: bool, context: Callable[[], Any]) -> dict[str, float]:
        total: collections.Counter = collections.Counter()
        inner: collections.Counter = collections.Counter()
        calls: collections.Counter = collections.Counter()

        def timed(name: str, installed: Callable) -> Callable:
            torch_method = installed.__wrapped__

            def stand_in(*args, **kwargs):
                start = clock()
                try:
                    return torch_method(*args, **kwargs)
                finally:
                    inner[name] += clock() - start
            through = makers[name](stand_in) if hooked else stand_in

            def outside(*args, **kwargs):
                calls[name] += 1
                start = clock()
                try:
                    return through(*args, **kwargs)
                finally:
                    total[name] += clock() - start
            return outside

        with hooks_replaced(timed), context():
            train(2)
            total.clear(), inner.clear(), calls.clear()
            train(steps)
            torch.cuda.synchronize()
        return {name: (total[name] - inner[name]) / steps for name in calls}

    out: dict[str, Any] = {"steps": steps, "repeats": repeats}
    runs = {name: [] for name in ("clocks_alone", *watching)}
    for _ in range(repeats):
        runs["clocks_alone"].append(own_ns(False, contextlib.nullcontext))
        for name, context in watching.items():
            runs[name].append(own_ns(True, context))
    medians = {variant: {m: statistics.median(r[m] for r in found) for m in found[0]} for variant, found in runs.items()}
    alone = medians.pop("clocks_alone")
    out["clocks_alone_us_per_step"] = {m: round(ns / 1000, 2) for m, ns in alone.items()}
    for variant, found in medians.items():
        own = {m: round((ns - alone.get(m, 0)) / 1000, 2) for m, ns in found.items()}
        out[f"{variant}_us_per_step"] = own | {"all": round(sum(own.values()), 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk", type=int, default=20, help="training steps per variant and round")
    parser.add_argument("--rounds", type=int, default=2000, help="at most this many rounds")
    parser.add_argument("--seconds", type=float, default=300, help="no round starts after this")
    parser.add_argument("--full-parts", action="store_true",
                        help='also "full", and "full" with its reads or its whole state read made free')
    parser.add_argument("--count-calls", action="store_true", help="also count the calls a step makes (Python 3.12+)")
    parser.add_argument("--hook-times", action="store_true",
                        help="also time the observer's hooks in place: µs per step in each, torch's method left out")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.chunk < 1 or args.rounds < 1:
        parser.error("--chunk and --rounds take a positive number")
    if args.count_calls and not hasattr(threading, "setprofile_all_threads"):
        parser.error(f"--count-calls needs Python 3.12 or later (this is {platform.python_version()})")
    if not torch.cuda.is_available():
        print("benchmarks/observer_parts.py needs a CUDA device", file=sys.stderr)
        return 2
    import cgviz

    more = {"unreached": unreached, "installed": installed, "idle_observer": idle_observer,
            "full_no_reads": functools.partial(full_without, "reads"),
            "full_const_state": functools.partial(full_without, "state")}
    parts = PARTS + (FULL_PARTS if args.full_parts else ())
    runs, warm, train = training_variants(args.chunk, more)
    runs = {name: runs[name] for name in ("no_observer", *parts)}
    warm()
    samples = interleaved(runs, args.rounds, args.seconds)
    figures = summary(samples, {f"{name}_vs_no_observer": (name, "no_observer") for name in parts})
    result = {"benchmark": "observer_parts", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "python": platform.python_version(), "steps_per_round": args.chunk,
              "rounds": len(samples["no_observer"]), "ms_per_step": figures}
    if args.count_calls:
        result["calls"] = calls_per_step(train, {"no_observer": contextlib.nullcontext, "events_no_work": events_no_work,
                                                 "events": lambda: cgviz.observe_torch(trace="events")})
    if args.hook_times:
        result["hook_times"] = hook_times(train, {
            "no_observer": contextlib.nullcontext, "events": lambda: cgviz.observe_torch(trace="events"),
            "full": lambda: cgviz.observe_torch(trace="full")})
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
