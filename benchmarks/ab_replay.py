"""Two versions of cgviz in one process: the replay loop of `(x * 2 + 1).relu()` on 16 floats
through this checkout's `Tree` and through another checkout's, beside a hand-written copy +
replay, interleaved in short rounds (as overhead.py).

Run in separate processes, old and new code differ by more from run to run than a change of a few
per cent; paired within rounds of one process they do not. The other checkout is imported first
under the name `cgviz`, its trees made and warmed up, and its modules then taken out of
`sys.modules` so that this checkout's are imported beside them; the timed calls import nothing.

Prints one JSON object (paired ratios: the median of the per-round ratios, quartiles, the 95 %
interval of the median); `--out PATH` also writes it.

usage: python benchmarks/ab_replay.py --old DIR [--levels None,events] [--seconds S] [--out PATH]
       (DIR: another version's files, e.g. `mkdir DIR && git archive COMMIT | tar -x -C DIR`)
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import sys
from functools import partial
from typing import Any, Callable

import torch
from _stats import copy_and_replay, emit, interleaved, paired, warmed_us

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout


def fn(x: torch.Tensor) -> torch.Tensor:
    return (x * 2 + 1).relu()


def load_cgviz(root: str) -> Any:
    """The cgviz package of the checkout at `root`, imported afresh; its modules are left out of
    sys.modules afterwards (they stay alive through the objects made from them)."""
    for name in [m for m in sys.modules if m == "cgviz" or m.startswith("cgviz.")]:
        del sys.modules[name]
    sys.path.insert(0, root)
    try:
        module = importlib.import_module("cgviz")
    finally:
        sys.path.remove(root)
    if os.path.dirname(os.path.dirname(os.path.abspath(module.__file__))) != os.path.abspath(root):
        raise RuntimeError(f"cgviz came from {module.__file__}, not from {root}")
    return module


def loops(cgviz: Any, x: torch.Tensor, levels: list[str], label: str) -> dict[str, Callable[[], object]]:
    """A warmed-up replay loop per trace level through this cgviz's Tree."""
    out = {}
    for level in levels:
        tree = cgviz.Tree("cuda", trace=None if level == "None" else level)
        wrapped = tree.wrap(fn, name="f")
        for _ in range(8):
            wrapped(x)  # warmup, record, then replays (and whatever the version keeps for the loop)
        if len(tree.nodes) != 2 or tree.nodes[1].replays != 6:
            raise RuntimeError(f"{label} trace={level}: the loop does not replay one graph ({tree.nodes})")
        out[f"{label}_{level}"] = lambda wrapped=wrapped: wrapped(x)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the other checkout (the folder holding its cgviz/)")
    parser.add_argument("--levels", default="None,events", help="trace levels, comma-separated")
    parser.add_argument("--calls", type=int, default=200, help="calls per variant and round")
    parser.add_argument("--seconds", type=float, default=60, help="no round starts after this")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/ab_replay.py needs a CUDA device", file=sys.stderr)
        return 2
    if not os.path.isdir(os.path.join(args.old, "cgviz")):
        print(f"--old {args.old!r} holds no cgviz/ folder", file=sys.stderr)
        return 2
    levels = args.levels.split(",")
    bad = [lv for lv in levels if lv not in ("None", "events", "full")]
    if bad:
        print(f"--levels: unknown trace level(s) {', '.join(bad)} (None, events, full)", file=sys.stderr)
        return 2
    x = torch.randn(16, device="cuda")
    runs: dict[str, Callable[[], object]] = {"copy_replay": copy_and_replay(fn, x)[0]}
    runs |= loops(load_cgviz(args.old), x, levels, "old")
    runs |= loops(load_cgviz(HERE), x, levels, "new")
    samples = interleaved({name: partial(warmed_us, step, args.calls) for name, step in runs.items()},
                          100000, args.seconds)
    result = {
        "benchmark": "ab_replay",
        "unit": "microseconds per call (median)",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "rounds": len(samples["copy_replay"]),
        "per_call_us": {name: round(statistics.median(v), 3) for name, v in samples.items()},
        "paired_ratios": {},
    }
    ratios = result["paired_ratios"]
    for level in levels:
        for label in ("old", "new"):
            ratios[f"{label}_{level}_vs_copy_replay"] = paired(samples[f"{label}_{level}"], samples["copy_replay"])
        ratios[f"new_{level}_vs_old_{level}"] = paired(samples[f"new_{level}"], samples[f"old_{level}"])
    for ratio in ratios.values():
        del ratio["per_round"]
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
