"""Per-call overhead on the GPU: cgviz's replay path beside raw CUDA graphs and torch's own trees.

Every variant runs the same small function, `(x * 2 + 1).relu()` on 16 floats, in one
process, in many short rounds: in each, every variant times N calls and one synchronize (N / 20,
at least 10, with `values=True`, which reads every output back) after a few untimed calls, in an
order that turns by one each round, the garbage collector collected once per round and off
inside it; no round starts after --seconds. Each figure: the median over rounds of the time per
call, with quartiles; each paired ratio (what the goals are read from): the median of the
per-round ratios with their quartiles and the 95 % interval of that median; `ratios_of_medians`
divides the medians of two variants, rounds unpaired. Prints one JSON object; `--out PATH` also
writes it to a file.

usage: python benchmarks/overhead.py [--calls N] [--rounds R] [--seconds S] [--out PATH]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from functools import partial
from typing import Callable

import torch
from _stats import copy_and_replay, emit, interleaved, paired, quartiles, warmed_us


def fn(x: torch.Tensor) -> torch.Tensor:
    return (x * 2 + 1).relu()


def variants(x: torch.Tensor) -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {"eager": lambda: fn(x)}

    copy_replay, graph = copy_and_replay(fn, x)
    out["raw_replay"] = graph.replay
    out["raw_copy_replay"] = copy_replay

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
    parser.add_argument("--calls", type=int, default=200, help="calls per variant and round")
    parser.add_argument("--rounds", type=int, default=2000, help="at most this many rounds")
    parser.add_argument("--seconds", type=float, default=60, help="no round starts after this")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/overhead.py needs a CUDA device", file=sys.stderr)
        return 2
    x = torch.randn(16, device="cuda")
    runs = variants(x)
    trees = {k: runs.pop(k) for k in [k for k in runs if k.startswith("_tree_")]}
    samples = interleaved({name: partial(warmed_us, step, args.calls if "values" not in name else max(args.calls // 20, 10))
                           for name, step in runs.items()}, args.rounds, args.seconds)
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
        "rounds": len(samples["cgviz_trace_None"]),
        "per_call_us": medians,
        "quartiles_us": quartiles_us,
        "paired_ratios": {
            "cgviz_None_vs_raw_copy_replay": paired(samples["cgviz_trace_None"], samples["raw_copy_replay"]),
            "cgviz_events_vs_None": paired(samples["cgviz_trace_events"], samples["cgviz_trace_None"]),
            "cgviz_full_vs_None": paired(samples["cgviz_trace_full"], samples["cgviz_trace_None"]),
        },
        "ratios_of_medians": {  # medians divided, rounds unpaired (goals marked paired: paired_ratios)
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
        "goals": {"cgviz_None_vs_raw_copy_replay": "<= 1.25 (paired)", "cgviz_events_vs_None": "<= 1.15 (paired)",
                  "cgviz_full_vs_None": "<= 1.5 (paired)", "cgviz_None_vs_torch_tree_manager": "<= 0.6"},
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
