"""What a CUDA graph saves and what it costs, measured on a GPU.

Notebook 1 shows these figures: the time to launch a chain of tiny kernels one by one against
one replay of the same chain captured in a graph, and the time to copy an input into a
graph's static buffer against the replay itself. `benchmarks/launch_cost.py` writes them to
`cgviz/data/gpu/launch_cost.json` so machines without a GPU can show them too.
"""

from __future__ import annotations

import datetime
import statistics
from typing import Any, Callable

KERNEL_COUNTS = (1, 2, 5, 10, 20, 50, 100)
COPY_BYTES = (4 * 1024, 64 * 1024, 1024**2, 16 * 1024**2, 256 * 1024**2)
CHAIN_ELEMENTS = 1024


def _median_us(run: Callable[[], Any], calls: int, repeats: int, sync: Callable[[], None]) -> float:
    """Median over `repeats` of the mean per-call time of `calls` back-to-back calls, in µs."""
    import time

    samples = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def _captured(fn: Callable[[], Any], torch: Any) -> Any:
    """`fn` captured into a CUDA graph after a warmup on a side stream, as torch advises."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def measure_launch_cost(device: str = "cuda", calls: int = 200, repeats: int = 7) -> dict:
    """Eager vs replay time for chains of tiny kernels, and input-copy vs replay time.

    Returns `{"meta": ..., "launch_overhead": [{"kernels", "eager_us", "replay_us"}],
    "input_copy": [{"nbytes", "copy_us", "replay_us"}]}`; times are medians of per-call means.
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("measure_launch_cost needs a CUDA device; use cgviz.data.gpu_figures('launch_cost')")
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {device!r}")
    sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731 - a one-line timer hook
    launch = []
    with torch.cuda.device(dev):
        x = torch.randn(CHAIN_ELEMENTS, device=dev)
        for kernels in KERNEL_COUNTS:
            # each x.add_(1.0) is one kernel launch, in place so the graph needs no new memory
            def eager(k: int = kernels) -> None:
                for _ in range(k):
                    x.add_(1.0)

            graph = _captured(eager, torch)
            launch.append({
                "kernels": kernels,
                "eager_us": round(_median_us(eager, calls, repeats, sync), 3),
                "replay_us": round(_median_us(graph.replay, calls, repeats, sync), 3),
            })
        copies = []
        y = torch.randn(CHAIN_ELEMENTS, device=dev)

        def small() -> None:
            for _ in range(10):
                y.add_(1.0)

        small_graph = _captured(small, torch)
        replay_us = _median_us(small_graph.replay, calls, repeats, sync)
        for nbytes in COPY_BYTES:
            static = torch.empty(nbytes // 4, device=dev)
            fresh = torch.randn(nbytes // 4, device=dev)
            n = max(5, min(calls, int(2e8 // nbytes)))
            copies.append({
                "nbytes": nbytes,
                "copy_us": round(_median_us(lambda s=static, f=fresh: s.copy_(f), n, repeats, sync), 3),
                "replay_us": round(replay_us, 3),
            })
            del static, fresh
    return {
        "meta": {
            "device": torch.cuda.get_device_name(dev),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "measured": datetime.date.today().isoformat(),
            "calls": calls,
            "repeats": repeats,
            "launch": f"k in-place adds on a {CHAIN_ELEMENTS}-element float32 tensor, launched one by one vs one replay",
            "copy": "copying one float32 input of nbytes into a static buffer vs replaying a 10-kernel graph",
        },
        "launch_overhead": launch,
        "input_copy": copies,
    }
