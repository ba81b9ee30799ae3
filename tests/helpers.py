"""Helpers shared by the test modules, written once so that every test reads a tree, a trace or a
figure the same way. tests/conftest.py puts this folder on sys.path: `from helpers import ...`
works from tests/ and from tests/gpu/ alike."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import torch

import cgviz
from cgviz.data import GPU_DIR

ROOT = Path(__file__).resolve().parent.parent  # the repository
GPU_TRACES = sorted(str(p) for p in GPU_DIR.glob("*.cgtrace.json"))  # shipped with cgviz
DECISIONS = ("warmup", "record", "execute", "eager", "error")  # the step kinds a call of a function makes


# -- tensors ------------------------------------------------------------------------------------
def data(*shape: int, seed: int = 0, device: str = "sim") -> torch.Tensor:
    """Random values fixed by `seed`, drawn on the CPU so that every machine gets the same ones, on
    the tensor device of a tree of `device` ("sim" trees take CPU tensors)."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return x if device == "sim" else x.to(device)


def same(a, b) -> bool:
    """Bit-for-bit equality of tensors or (nested) tuples of tensors."""
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


# -- a tree's trace -----------------------------------------------------------------------------
def kinds(tree, start: int | None = None) -> list[str]:
    """Kinds of every decision, repeated blocks unrolled; or of the steps stored from `start` on."""
    if start is None:
        return [s.kind for s in tree.trace.expanded()]
    return [s.kind for s in tree.trace.steps[start:]]


def calls(tree) -> list[str]:
    """Step kinds of function calls only (path ends and restores left out)."""
    return [k for k in kinds(tree) if k in DECISIONS]


def steps_of(tree, kind: str) -> list:
    """Every decision of this kind, in order (repeated blocks unrolled)."""
    return [s for s in tree.trace.expanded() if s.kind == kind]


def last_step(tree):
    return tree.trace.steps[-1]


def graph_nodes(snapshot, function: str | None = None) -> list:
    return [n for n in snapshot.nodes if n.kind == "graph" and (function is None or n.function == function)]


def mlp(device: str) -> torch.nn.Module:
    """A small model, the same weights every time: Linear(32, 64), ReLU, Linear(64, 8)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)


# -- small workloads of the engine tests ---------------------------------------------------------
def f_affine(x):
    return (x * 2 + 1).relu()


def chain_tree():
    """A sim tree and three functions, f → g → h, that a call chains into one path."""
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x + 1, name="f")
    g = tree.wrap(lambda x: x * 2, name="g")
    h = tree.wrap(lambda x: x - 3, name="h")
    return tree, f, g, h


# -- source lines and figures -----------------------------------------------------------------
def line_of(fn, text: str) -> int:
    """The line number of `text` in fn's source."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def texts(fig) -> list[str]:
    """Every non-empty text of a matplotlib figure."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def by_gid(fig, gid):
    """The one artist of a matplotlib figure with this gid."""
    found = [a for a in fig.findobj() if getattr(a, "get_gid", lambda: None)() == gid]
    assert len(found) == 1, f"{len(found)} artists with gid {gid}"
    return found[0]


# -- traces recorded on a GPU --------------------------------------------------------------------
def keep_trace(trace, stem: str) -> None:
    """With CGVIZ_TRACE_DIR set, save the trace there as `stem`.cgtrace.json: the GPU tests record
    the traces cgviz ships (cgviz/data/) for machines without a GPU."""
    out = os.environ.get("CGVIZ_TRACE_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        trace.save(Path(out) / f"{stem}.cgtrace.json")


def still_drawings(still_html: str) -> list[str]:
    """The SVG drawings of an Explorer's still picture (images with data URLs), decoded, in order."""
    import base64
    import re

    return [base64.b64decode(d).decode("utf-8")
            for d in re.findall(r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', still_html)]
