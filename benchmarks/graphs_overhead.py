"""What observing a plain CUDA graph costs per replay (cgviz.observe_graphs), on the GPU.

One small graph, `(x * 2 + 1).relu()` on 16 floats, replayed N times per round; the variants
(no observer, trace "events", "full", "events" with timed replays) run interleaved in each of R
rounds in one process, so drift hits all alike. Two loops: replays back to back ("gpu_bound":
the GPU's few µs per replay set the pace, and host work hides behind it), and replays with a
few µs of Python between them ("host_bound": the host sets the pace, so every µs the observer
adds shows). Each figure is µs per replay (the loop and one
synchronize, over N); the medians, their quartiles, and each variant's median extra µs over
the plain replay. Prints one JSON object; `--out PATH` also writes it.

usage: python benchmarks/graphs_overhead.py [--replays N] [--rounds R] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import platform
import statistics
import sys
import time

import torch

import cgviz
from _stats import emit, medians, paired

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


def host_work() -> int:
    """A few µs of Python, as a serving loop does between replays."""
    return sum(range(400))


def one_round(graph: torch.cuda.CUDAGraph, options, replays: int, host: bool) -> float:
    observing = cgviz.observe_graphs(**options) if options is not None else contextlib.nullcontext()
    with observing:
        for _ in range(50):
            graph.replay()
        torch.cuda.synchronize()
        gc.disable()
        try:
            start = time.perf_counter_ns()
            if host:
                for _ in range(replays):
                    host_work()
                    graph.replay()
            else:
                for _ in range(replays):
                    graph.replay()
            torch.cuda.synchronize()
            took = (time.perf_counter_ns() - start) / replays / 1000
        finally:
            gc.enable()
    return took


def summary(samples: dict[str, list[float]]) -> dict:
    """Medians and quartiles per variant; per round, each variant's extra over that round's plain
    replay (median and quartiles); and the ratio of medians."""
    plain = statistics.median(samples["plain"])
    observed = {k: v for k, v in samples.items() if k != "plain"}
    extra = {k: paired(v, samples["plain"], lambda x, y: x - y) for k, v in observed.items()}
    return medians(samples) | {
        "extra_us": {k: e["median"] for k, e in extra.items()},
        "extra_quartiles": {k: e["quartiles"] for k, e in extra.items()},
        "ratio_to_plain": {k: round(statistics.median(v) / plain, 3) for k, v in samples.items()},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    graph = capture()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
           "replays_per_round": args.replays, "rounds": args.rounds, "unit": "us per replay"}
    samples = {loop: {name: [] for name in VARIANTS} for loop in ("gpu_bound", "host_bound")}
    for _ in range(args.rounds):
        for loop, by_variant in samples.items():
            for name, options in VARIANTS.items():
                by_variant[name].append(one_round(graph, options, args.replays, loop == "host_bound"))
    for loop, by_variant in samples.items():
        out[loop] = summary(by_variant)
    emit(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
