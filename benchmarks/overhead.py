"""Per-call overhead on the GPU: cgviz's replay path beside raw CUDA graphs and torch's own trees.

Every variant runs the same small function, `(x * 2 + 1).relu()` on 16 floats, in one
process; each figure is the median over repetitions of (time for N calls + one
synchronize) / N (N / 20 with `values=True`, which reads every output back). Prints one JSON object; `--out PATH` also writes it to a file.

usage: python benchmarks/overhead.py [--calls N] [--repeats R] [--out PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from typing import Callable

import torch
from _stats import paired, quartiles


def fn(x: torch.Tensor) -> torch.Tensor:
    return (x * 2 + 1).relu()


def per_call_us(step: Callable[[], object], calls: int, repeats: int) -> float:
    """Median over `repeats` of the wall time per call of `calls` calls (GPU work included).

    The garbage collector is off while timing, as `timeit` does, so a collection caused by
    one variant's garbage is not charged to another.
    """
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    samples = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            for _ in range(calls):
                step()
            torch.cuda.synchronize()
            samples.append((time.perf_counter_ns() - start) / calls / 1000)
    finally:
        gc.enable()
    return statistics.median(samples)


def variants(x: torch.Tensor) -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {"eager": lambda: fn(x)}

    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(static_x)  # warm up outside capture
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        fn(static_x)
    out["raw_replay"] = graph.replay

    def copy_and_replay():
        static_x.copy_(x)
        graph.replay()

    out["raw_copy_replay"] = copy_and_replay

    from torch._inductor.cudagraph_trees import cudagraphify

    def model(inputs):
        (t,) = inputs
        inputs.clear()
        return (fn(t),)

    tree_fn, _ = cudagraphify(
        model, [x], (), device_index=x.device.index or 0, is_backward=False, is_inference=True, stack_traces=[None]
    )

    def torch_tree():
        torch.compiler.cudagraph_mark_step_begin()
        return tree_fn([x])

    out["torch_tree_manager"] = torch_tree

    compiled = torch.compile(fn, mode="reduce-overhead")
    out["torch_compile_reduce_overhead"] = lambda: compiled(x)

    import cgviz

    # trace levels, and what a profile (kernels, CUDA-event times) and kept values add at "full"
    configs = {
        "None": {"trace": None}, "events": {"trace": "events"}, "events_profile": {"trace": "events", "profile": True},
        "full_no_profile": {"trace": "full", "profile": False}, "full": {"trace": "full"},
        "full_values": {"trace": "full", "values": True},
    }
    for level, options in configs.items():
        tree = cgviz.Tree("cuda", **options)
        wrapped = tree.wrap(fn, name="f")
        for _ in range(5):
            wrapped(x)  # warmup, record, then replays
        if len(tree.nodes) != 2 or tree.nodes[1].replays != 3:
            raise RuntimeError(f"cgviz trace={level}: the loop does not replay one graph ({tree.nodes})")
        out[f"cgviz_trace_{level}"] = lambda wrapped=wrapped: wrapped(x)
        out[f"_tree_{level}"] = tree
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/overhead.py needs a CUDA device", file=sys.stderr)
        return 2
    x = torch.randn(16, device="cuda")
    runs = variants(x)
    trees = {k: runs.pop(k) for k in [k for k in runs if k.startswith("_tree_")]}
    # interleave repetitions of all variants so drift affects them alike
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, step in runs.items():
            calls = args.calls if "values" not in name else max(args.calls // 20, 50)
            samples[name].append(per_call_us(step, calls, 1))
    medians = {name: round(statistics.median(v), 2) for name, v in samples.items()}
    for level, tree in trees.items():
        kinds = tree.trace.counts() if tree.trace_level else {}
        assert tree.nodes and tree.nodes[-1].replays > 0, f"{level}: the replay path was not hit"
        if kinds:
            assert kinds["execute"] > 0
    quartiles_us = {name: quartiles(v, 2) for name, v in samples.items()}

    base = medians["cgviz_trace_None"]
    result = {
        "benchmark": "overhead",
        "function": "(x * 2 + 1).relu() on 16 float32",
        "unit": "microseconds per call (median)",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "calls": args.calls,
        "repeats": args.repeats,
        "per_call_us": medians,
        "quartiles_us": quartiles_us,
        "paired_ratios": {
            "cgviz_None_vs_raw_copy_replay": paired(samples["cgviz_trace_None"], samples["raw_copy_replay"]),
            "cgviz_events_vs_None": paired(samples["cgviz_trace_events"], samples["cgviz_trace_None"]),
            "cgviz_full_vs_None": paired(samples["cgviz_trace_full"], samples["cgviz_trace_None"]),
        },
        "ratios": {
            "cgviz_None_vs_raw_copy_replay": round(base / medians["raw_copy_replay"], 3),
            "cgviz_None_vs_torch_tree_manager": round(base / medians["torch_tree_manager"], 3),
            "cgviz_None_vs_eager": round(base / medians["eager"], 3),
            "cgviz_events_vs_None": round(medians["cgviz_trace_events"] / base, 3),
            "cgviz_full_vs_None": round(medians["cgviz_trace_full"] / base, 3),
            "cgviz_events_profile_vs_events": round(medians["cgviz_trace_events_profile"] / medians["cgviz_trace_events"], 3),
            "cgviz_full_vs_full_no_profile": round(medians["cgviz_trace_full"] / medians["cgviz_trace_full_no_profile"], 3),
            "cgviz_full_values_vs_full": round(medians["cgviz_trace_full_values"] / medians["cgviz_trace_full"], 3),
            "torch_tree_manager_vs_raw_copy_replay": round(medians["torch_tree_manager"] / medians["raw_copy_replay"], 3),
        },
        "goals": {"cgviz_None_vs_raw_copy_replay": "<= 1.25", "cgviz_events_vs_None": "<= 1.15",
                  "cgviz_full_vs_None": "<= 1.5", "cgviz_None_vs_torch_tree_manager": "<= 0.6"},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
