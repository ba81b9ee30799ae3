"""What observing a plain CUDA graph costs per replay (cgviz.observe_graphs), on the GPU.

One small graph, `(x * 2 + 1).relu()` on 16 floats, replayed N times per round; the variants
(no observer, trace "events", "full", "events" with timed replays) run interleaved in each of R
rounds in one process, so drift hits all alike. Each figure is µs per replay (the loop and one
synchronize, over N); the medians, their quartiles, and each variant's median extra µs over
the plain replay. Prints one JSON object; `--out PATH` also writes it.

usage: python benchmarks/graphs_overhead.py [--replays N] [--rounds R] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import statistics
import sys
import time

import torch

import cgviz

VARIANTS = {
    "plain": None,
    "events": {"trace": "events"},
    "full": {"trace": "full"},
    "events_timed": {"trace": "events", "timed": True},
}


def capture() -> torch.cuda.CUDAGraph:
    x = torch.randn(16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        (x * 2 + 1).relu()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (x * 2 + 1).relu()
    graph.x = x  # keep the input alive with the graph
    return graph


def one_round(graph: torch.cuda.CUDAGraph, options, replays: int) -> float:
    observing = cgviz.observe_graphs(**options) if options is not None else contextlib.nullcontext()
    with observing:
        for _ in range(50):
            graph.replay()
        torch.cuda.synchronize()
        gc.disable()
        try:
            start = time.perf_counter_ns()
            for _ in range(replays):
                graph.replay()
            torch.cuda.synchronize()
            took = (time.perf_counter_ns() - start) / replays / 1000
        finally:
            gc.enable()
    return took


def quartiles(xs: list[float]) -> list[float]:
    q = statistics.quantiles(xs, n=4)
    return [round(q[0], 3), round(q[2], 3)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    graph = capture()
    samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, options in VARIANTS.items():
            samples[name].append(one_round(graph, options, args.replays))
    plain = statistics.median(samples["plain"])
    out = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
        "replays_per_round": args.replays, "rounds": args.rounds, "unit": "us per replay",
        "median": {k: round(statistics.median(v), 3) for k, v in samples.items()},
        "quartiles": {k: quartiles(v) for k, v in samples.items()},
        # per round, each variant's extra over that round's plain replay: its median and quartiles
        "extra_us": {k: round(statistics.median(a - b for a, b in zip(v, samples["plain"])), 3)
                     for k, v in samples.items() if k != "plain"},
        "extra_quartiles": {k: quartiles([a - b for a, b in zip(v, samples["plain"])])
                            for k, v in samples.items() if k != "plain"},
        "ratio_to_plain": {k: round(statistics.median(v) / plain, 3) for k, v in samples.items()},
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
