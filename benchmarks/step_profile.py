"""Where a steady training step's time goes, sampled from outside the process: cgviz's own share.

A paired ratio (`resnet_levels.py`) says what observing costs a step, spread included; a sampling
profiler run outside the process says where, without changing the code it measures. `loop` runs
the resnet18 training loop of `resnet_levels.py` at one observer level for a while (its steady
steps inside `steady_steps`, which the samples are picked by); `share` reads what py-spy sampled
(its raw format: one stack a line, its frames joined by ';', then the count) and prints, as JSON,
cgviz's share of the steady steps: the samples whose innermost frame is cgviz's code, by function
and by line, against the main thread's steady samples. Time in C that cgviz's code calls counts
as cgviz's (py-spy gives it the calling line); time torch's code loses to what cgviz's work
evicted from the caches does not.

A compiled backward's Python (torch's replay of its graph, and cgviz's hooks on it) runs on
autograd's device thread while the main thread waits in torch's engine. Its stacks carry no mark
of a steady step: a sample under autograd's call of the backward counts as a steady step's unless
it is of a call torch warms up or records, or a function's first (NOT_STEADY). Sample with
`--idle`: the main thread's wait is then sampled too, and the share is of the steps' wall time
(without it, of the main thread's busy time, which leaves the wait out).

usage (py-spy is not a dependency of cgviz):
  py-spy record --idle --rate 2000 --format raw --nonblocking -o full.txt -- \\
      python benchmarks/step_profile.py loop full --seconds 15
  python benchmarks/step_profile.py share full.txt [events.txt ...] [--top N] [--out PATH]

`loop` needs a CUDA device and torchvision; `share` runs anywhere.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]
from _stats import emit  # noqa: E402

STEADY = "steady_steps"  # the function whose frames mark a steady step's samples
BACKWARD = "BackwardCFunction.apply ("  # autograd calling a compiled backward, on its device thread
NOT_STEADY = ("run_eager (", "record_function (", "add_function (")  # torch warming up, recording, a first call
LEVELS = ("none", "events", "full")


def steady_steps(train: Callable[[int], None], caught_up: Callable[[], None], seconds: float, chunk: int = 20) -> int:
    """Training steps for `seconds`, each chunk's noted events made into steps; how many ran."""
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        train(chunk)
        caught_up()
        steps += chunk
    return steps


def loop(level: str, seconds: float) -> dict:
    """The training loop's steady steps at `level` for `seconds`, after its warmups and records:
    how many ran, and their mean time a step."""
    import contextlib
    import gc

    import torch

    import cgviz
    from resnet_levels import caught_up, training_variants

    _, warm, train = training_variants(20)
    warm()
    watching = contextlib.nullcontext() if level == "none" else cgviz.observe_torch(trace=level)
    gc.disable()  # as the paired benchmark holds it off
    try:
        with watching:
            train(10)
            caught_up()
            torch.cuda.synchronize()
            start = time.perf_counter()
            steps = steady_steps(train, caught_up, seconds)
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "level": level,
            "steps": steps, "ms_per_step": round(elapsed / steps * 1e3, 4)}


def stacks(lines: Iterable[str]) -> Iterable[tuple[list[str], int]]:
    """(frames, samples) of each line of py-spy's raw format; a line that is not one is skipped."""
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def cgviz_frame(frame: str) -> bool:
    """Is this frame cgviz's code ("function (cgviz/observe/observer.py:285)")?"""
    return "(cgviz/" in frame or "/cgviz/" in frame


def share(lines: Iterable[str], top: int = 15) -> dict:
    """The steady steps' samples and the share of them spent in cgviz's own code (percent)."""
    total, backward, by_line = 0, 0, collections.Counter()
    for frames, count in stacks(lines):
        if any(STEADY + " (" in frame for frame in frames):
            total += count
        elif any(BACKWARD in frame for frame in frames) and not any(
                marker in frame for frame in frames for marker in NOT_STEADY):
            backward += count
        else:
            continue
        if cgviz_frame(frames[-1]):
            by_line[frames[-1]] += count
    if not total:
        raise ValueError(f"no sample is of a steady step (no frame of {STEADY}): was `loop` the program sampled?")
    by_function: collections.Counter = collections.Counter()
    for frame, count in by_line.items():
        by_function[re.sub(r":\d+\)$", ")", frame)] += count

    def percent(counter: collections.Counter) -> dict[str, float]:
        return {name: round(100 * n / total, 2) for name, n in counter.most_common(top)}

    return {"steady_samples": total, "backward_thread_samples": backward,
            "cgviz_percent": round(100 * sum(by_line.values()) / total, 2),
            "by_function": percent(by_function), "by_line": percent(by_line)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("loop", help="the training loop at one level, to be sampled")
    run.add_argument("level", choices=LEVELS)
    run.add_argument("--seconds", type=float, default=15.0)
    read = sub.add_parser("share", help="cgviz's share of the steady steps' samples")
    read.add_argument("raw", nargs="+", type=Path, help="py-spy record --format raw output")
    read.add_argument("--top", type=int, default=15)
    read.add_argument("--out")
    args = parser.parse_args(argv)
    if args.command == "loop":
        if args.seconds <= 0:
            parser.error("--seconds takes a positive number")
        import torch

        if not torch.cuda.is_available():
            print("step_profile.py loop needs a CUDA device (none is visible)", file=sys.stderr)
            return 2
        emit(loop(args.level, args.seconds), None)
        return 0
    if args.top <= 0:
        parser.error("--top takes a positive number")
    result = {}
    for path in args.raw:
        try:
            with open(path, errors="replace") as f:
                result[path.name] = share(f, args.top)
        except (OSError, ValueError) as exc:
            print(f"step_profile.py share: {path}: {exc}", file=sys.stderr)
            return 2
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
