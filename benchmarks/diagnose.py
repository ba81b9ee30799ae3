"""How long `cgviz.diagnose` takes on the synthetic 1,000-node / 10,000-step trace of
benchmarks/render.py (trace level "full"), and on the same trace without its snapshots
("events"). Median of --repeats runs; the goal stated by the project is ≤ 1 s. Prints JSON.

usage: python benchmarks/diagnose.py [--nodes N] [--steps S] [--repeats R] [--out PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

import cgviz  # noqa: E402
from _stats import emit  # noqa: E402
from render import synthetic_trace  # noqa: E402

GOAL_S = 1.0


def timed(trace, repeats: int) -> dict:
    samples, found = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        found = cgviz.diagnose(trace)
        samples.append(time.perf_counter() - t)
    median = statistics.median(samples)
    return {"median_s": round(median, 3), "vs_goal": round(median / GOAL_S, 3), "findings": len(found),
            "kinds": sorted({f.kind for f in found})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    trace, _ = synthetic_trace(nodes=args.nodes, steps=args.steps)
    events = dataclasses.replace(trace, steps=[dataclasses.replace(s, snapshot=None) for s in trace.steps])
    result = {
        "benchmark": "diagnose", "trace": {"nodes": args.nodes, "steps": len(trace.steps)},
        "goal_s": GOAL_S, "python": platform.python_version(), "repeats": args.repeats,
        "full": timed(trace, args.repeats), "events": timed(events, args.repeats),
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
