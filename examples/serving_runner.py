"""A serving-style runner in plain torch: one CUDA graph per batch size, a request batch padded
up to the nearest size and replayed (what vLLM, SGLang and TensorRT-LLM's PyTorch flow do).

    python examples/serving_runner.py                       # serve 300 request batches
    python examples/serving_runner.py --trace-out t.cgtrace.json   # ... observed by cgviz
    python examples/serving_runner.py --recapture           # the bug: capture again each batch

The graphs share one memory pool (`torch.cuda.graph_pool_handle()`), captured largest first so
the smaller ones reuse its memory. Each capture and each replay says its batch size, and each
replay how many of its rows are requests (`cgviz.graph_batch`): padding is invisible to the
graph itself. Batch size 64 is captured but no request batch is ever that large, so its graph
is never replayed. With `--recapture`, the runner captures a new graph for every request batch
(a cache keyed by the wrong thing does this), replays each once, and keeps every graph it
replaced with its output: the shared pool grows.
"""

from __future__ import annotations

import argparse
import random
import sys
from contextlib import nullcontext

import torch
import torch.nn as nn

import cgviz

SIZES = (1, 2, 4, 8, 16, 32, 64)  # the batch sizes a graph is captured for
HIDDEN = 512


class DecodeStep(nn.Module):
    """One decode step of a small model: embedding row in, next-token logits out."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.LayerNorm(HIDDEN), nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(),
                                   nn.Linear(4 * HIDDEN, HIDDEN))
        self.head = nn.Linear(HIDDEN, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x + self.block(x))


class GraphRunner:
    """Static input and output buffers and a CUDA graph per batch size, sharing one pool."""

    def __init__(self, model: nn.Module, sizes: tuple[int, ...]) -> None:
        self.model = model
        self.pool = torch.cuda.graph_pool_handle()
        self.static_in = torch.zeros(max(sizes), HIDDEN, device="cuda")
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.retired: list[tuple[torch.cuda.CUDAGraph, torch.Tensor]] = []  # replaced, but kept
        for size in sorted(sizes, reverse=True):  # largest first: the smaller graphs reuse its memory
            self.capture(size)

    def capture(self, size: int) -> None:
        x = self.static_in[:size]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up on a side stream, as torch's docs do
            self.model(x)
        torch.cuda.current_stream().wait_stream(side)
        if size in self.graphs:  # the bug's cache: the graph it replaces is kept, with its output
            self.retired.append((self.graphs[size], self.outputs[size]))
        graph = torch.cuda.CUDAGraph()
        with cgviz.graph_batch(size, label=f"batch {size}"):
            with torch.cuda.graph(graph, pool=self.pool):
                self.outputs[size] = self.model(x)
        self.graphs[size] = graph

    def run(self, requests: torch.Tensor) -> torch.Tensor:
        n = requests.shape[0]
        size = next(s for s in sorted(self.graphs) if s >= n)  # pad up to the nearest graph
        self.static_in[:n].copy_(requests)
        self.static_in[n:size].zero_()
        with cgviz.graph_batch(size, used=n):
            self.graphs[size].replay()
        return self.outputs[size][:n]


def serve(batches: int, recapture: bool, seed: int = 0) -> float:
    """Serve `batches` request batches of 1 to 24 requests; returns the sum of the logits."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = DecodeStep().cuda().eval()
    total = 0.0
    with torch.inference_mode():
        runner = GraphRunner(model, SIZES)
        for _ in range(batches):
            n = rng.randint(1, 24)
            requests = torch.randn(n, HIDDEN, device="cuda")
            if recapture:  # the bug: a new graph for every batch, replayed once
                size = next(s for s in SIZES if s >= n)
                runner.capture(size)
            total += runner.run(requests).float().sum().item()
    return total


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--recapture", action="store_true", help="capture a new graph for every request batch")
    parser.add_argument("--trace-out", help="observe the run with cgviz.observe_graphs and save the trace here")
    parser.add_argument("--timed", action="store_true", help="time each replay with CUDA events")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    observing = (cgviz.observe_graphs(path=args.trace_out, timed=args.timed) if args.trace_out else nullcontext())
    with observing:
        total = serve(args.batches, args.recapture)
    print(f"served {args.batches} request batches; logit sum {total:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
