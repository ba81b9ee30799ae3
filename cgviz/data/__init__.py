"""Traces recorded on a GPU, shipped for notebooks and tests on machines without one.

`torch_trace("torch_training")` is one of torch.compile's own trees, observed with
`cgviz.observe_torch()` on the same machine.

`gpu_trace("branching")` is the trace of that scenario (`cgviz.scenarios`) recorded with the
cuda backend on an NVIDIA H100 with torch 2.11 (the trace's `meta` says so).

`torch_trace("torch_two_devices")` is one process calling a compiled function on cuda:0 and
cuda:1 in turn: torch keeps a tree per device, and every step says whose it is
(tests/gpu/test_multi_gpu.py, two H200s).

`ddp_traces("planted")` are the two ranks' traces of a DDP training compiled with
mode="reduce-overhead" (tests/gpu/ddp_reduce_overhead.py under torchrun: NCCL, one H200 a
rank), where rank 1 got a batch of another size at one step; `ddp_traces("clean")`, the same
without.
`cgviz.merge(ddp_traces("planted"))` flags where the ranks diverged.

`graph_trace("serving_runner")` is examples/serving_runner.py (a CUDA graph per batch size,
padded batches replayed) observed with `cgviz.observe_graphs(timed=True)` on a GPU with torch
2.11; `graph_trace("serving_runner-recapture")` is the same runner with its bug (--recapture).

`surprise_trace("grad_accumulation")` is a program of examples/surprises (a reduce-overhead
surprise users reported) recorded with `cgviz run` on an H200 or H100 with torch 2.11;
`surprise_trace("grad_accumulation-fixed")` is the same program with its fix (`--fixed`).
"""

from __future__ import annotations

from pathlib import Path

GPU_DIR = Path(__file__).resolve().parent / "gpu"
TORCH_DIR = Path(__file__).resolve().parent / "torch"
DDP_DIR = Path(__file__).resolve().parent / "ddp"
SURPRISES_DIR = Path(__file__).resolve().parent / "surprises"
GRAPHS_DIR = Path(__file__).resolve().parent / "graphs"


def ddp_traces(run: str) -> list[Path]:
    """The rank traces of the DDP run `run` ("planted" or "clean"), rank 0 first."""
    paths = sorted(DDP_DIR.glob(f"{run}-*.cgtrace.json"))
    if not paths:
        runs = sorted({p.name.split("-")[0] for p in DDP_DIR.glob("*.cgtrace.json")})
        raise KeyError(f"no DDP run named {run!r}; there are: {', '.join(runs)}")
    return paths


def _names(folder: Path) -> list[str]:
    return sorted(p.name.removesuffix(".cgtrace.json") for p in folder.glob("*.cgtrace.json"))


def _trace(folder: Path, name: str, what: str):
    """The shipped trace `name` of `folder`, or a KeyError that lists the names there are."""
    from cgviz.trace.io import load_trace

    path = folder / f"{name}.cgtrace.json"
    if not path.exists():
        raise KeyError(f"no {what} named {name!r}; there are: {', '.join(_names(folder))}")
    return load_trace(path)


def gpu_trace_names() -> list[str]:
    return _names(GPU_DIR)


def gpu_trace(name: str):
    """The committed GPU trace of scenario `name`."""
    return _trace(GPU_DIR, name, "GPU trace")


def torch_trace_names() -> list[str]:
    return _names(TORCH_DIR)


def torch_trace(name: str):
    """A trace of torch.compile(mode="reduce-overhead") recorded by cgviz.observe_torch on a GPU:
    torch_inference, torch_training, torch_dynamic_shapes, torch_cpu_input, torch_overwritten,
    torch_two_devices, ... (`torch_trace_names()` lists them)."""
    return _trace(TORCH_DIR, name, "torch.compile trace")


def gpu_figures(name: str) -> dict:
    """Measurements made on a GPU and shipped as JSON (`launch_cost`: see cgviz.launch_cost)."""
    import json

    path = GPU_DIR / f"{name}.json"
    if not path.exists():
        names = sorted(p.stem for p in GPU_DIR.glob("*.json") if not p.name.endswith(".cgtrace.json"))
        raise KeyError(f"no GPU figures named {name!r}; there are: {', '.join(names)}")
    return json.loads(path.read_text(encoding="utf-8"))


def surprise_names() -> list[str]:
    """The recorded programs of examples/surprises, each also as "<name>-fixed"."""
    return _names(SURPRISES_DIR)


def surprise_trace(name: str):
    """The trace `cgviz run` recorded of examples/surprises/<name>.py on a GPU ("<name>-fixed": with --fixed)."""
    return _trace(SURPRISES_DIR, name, "recorded surprise")


def graph_trace_names() -> list[str]:
    return _names(GRAPHS_DIR)


def graph_trace(name: str):
    """A trace of plain CUDA graphs (`cgviz.observe_graphs`) recorded on a GPU: serving_runner,
    serving_runner-recapture (`graph_trace_names()` lists them)."""
    return _trace(GRAPHS_DIR, name, "CUDA graphs trace")
