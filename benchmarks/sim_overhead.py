"""Per-call overhead of the sim backend's replay path, beside eager, at each trace level.

For each workload, one process times: the function called eagerly, and the same function
wrapped into a `cgviz.Tree("sim")` with trace=None, "events" and "full", after warmup and
record, so every timed call replays (the output is dropped after each call, so the path ends
and the root replays again; the trace is checked to show the replays). Each figure is the
median over repetitions of (time for N calls) / N, measured with time.perf_counter_ns; the
repetitions of all variants are interleaved so that drift affects them alike.

Prints one JSON object: per-call microseconds and ratios side by side, and the environment.
Sim timings measure cgviz's own Python overhead on the CPU, not a GPU.

usage: python benchmarks/sim_overhead.py [--quick] [--calls N] [--repeats R] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run as a script from a checkout: import this checkout's cgviz
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import cgviz

LEVELS = (None, "events", "full")


def small(x: torch.Tensor) -> torch.Tensor:
    return (x * 2 + 1).relu()


def mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w1) @ w2 + x


def workloads() -> dict[str, dict]:
    gen = torch.Generator().manual_seed(0)
    return {
        "small": {
            "description": "(x * 2 + 1).relu() on 16 float32 (as benchmarks/overhead.py on the GPU)",
            "fn": small,
            "args": (torch.randn(16, generator=gen),),
            "static": (),
        },
        "mlp": {
            "description": "tanh(x @ w1) @ w2 + x, x: 32x64, w1, w2: 64x64 static float32",
            "fn": mlp,
            "args": (torch.randn(32, 64, generator=gen), torch.randn(64, 64, generator=gen), torch.randn(64, 64, generator=gen)),
            "static": (1, 2),
        },
    }


def label(level) -> str:
    return f"sim_trace_{level}"


def time_per_call_us(step: Callable[[], object], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        step()  # the result is dropped at once: the next call replays the root again
    return (time.perf_counter_ns() - start) / calls / 1000


def bench_workload(spec: dict, calls: int, repeats: int) -> dict:
    fn, args = spec["fn"], spec["args"]
    steps: dict[str, Callable[[], object]] = {"eager": lambda: fn(*args)}
    trees = {}
    for level in LEVELS:
        tree = cgviz.Tree("sim", trace=level)
        wrapped = tree.wrap(fn, static=spec["static"], name=fn.__name__)
        for _ in range(3):
            wrapped(*args)  # warmup, record, first replay (each output dropped)
        steps[label(level)] = lambda wrapped=wrapped: wrapped(*args)
        trees[level] = tree
    # snapshots make "full" much slower: fewer calls there, so every variant takes similar time
    n_calls = {name: calls if not name.endswith("full") else max(calls // 20, 20) for name in steps}
    for name, step in steps.items():  # warm caches, allocator and dispatch
        time_per_call_us(step, min(n_calls[name], 50))
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            samples[name].append(time_per_call_us(step, n_calls[name]))

    for level, tree in trees.items():  # every timed call must have replayed the recorded root
        graphs = [n for n in tree.nodes if n.kind == "graph"]
        assert len(graphs) == 1, f"trace={level}: expected one recorded graph, got {len(graphs)}"
        n = n_calls[label(level)]
        expected = 1 + min(n, 50) + repeats * n  # the first replay, the warm-up calls, the timed calls
        assert graphs[0].replays == expected, f"trace={level}: {graphs[0].replays} replays, expected {expected}"
        if level is not None:
            counts = tree.trace.counts()
            assert counts.get("execute", 0) == expected, f"trace={level}: trace counts {counts}"
            assert counts.get("record", 0) == 1 and counts.get("eager", 0) == 0, counts

    medians = {name: round(statistics.median(v), 3) for name, v in samples.items()}
    base = medians[label(None)]
    return {
        "description": spec["description"],
        "calls_per_repeat": n_calls,
        "per_call_us": medians,
        "min_us": {name: round(min(v), 3) for name, v in samples.items()},
        "ratio_vs_eager": {name: round(m / medians["eager"], 2) for name, m in medians.items() if name != "eager"},
        "ratio_vs_trace_None": {
            label("events"): round(medians[label("events")] / base, 3),
            label("full"): round(medians[label("full")] / base, 3),
        },
        "overhead_us_vs_eager": {name: round(m - medians["eager"], 3) for name, m in medians.items() if name != "eager"},
    }


def environment() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cgviz": cgviz.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (few calls, 3 repeats)")
    parser.add_argument("--calls", type=int, help="calls per repetition (default 2000; 100 with --quick)")
    parser.add_argument("--repeats", type=int, help="repetitions (default 7; 3 with --quick)")
    parser.add_argument("--out", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    calls = args.calls or (100 if args.quick else 2000)
    repeats = args.repeats or (3 if args.quick else 7)
    if calls < 1 or repeats < 1:
        parser.error("--calls and --repeats must be positive")

    results = {name: bench_workload(spec, calls, repeats) for name, spec in workloads().items()}
    result = {
        "benchmark": "sim_overhead",
        "unit": "microseconds per call (median over repeats)",
        "what": "eager call vs the sim tree's replay path (after warmup and record) at trace=None/'events'/'full'",
        "quick": args.quick,
        "calls": calls,
        "repeats": repeats,
        "workloads": results,
        "environment": environment(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
