"""The words every layer says alike: a step's headline, a node's times and the kernels of its
graph, built on the units of trace/units.py (bytes, µs, counted words). Producers use them too
(`Step.headline()`, `Tree.explain()`); views/text.py re-exports them with the rest of the
sentences cgviz shows people."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from cgviz.trace.profile import ProfileEntry, profile_entry
from cgviz.trace.units import format_us, plural

if TYPE_CHECKING:
    from cgviz.trace.model import Step

__all__ = ["headline", "time_line", "kernel_label", "kernel_summary"]


def headline(step: "Step") -> str:
    """A step in one line: 'record g → node 3 · generation 2', 'generation 3 begins' (· ×N for
    folded repeats); in a merged multi-rank trace, its rank first: 'rank 1 · record g → node 3 ·
    generation 2'; in a trace of trees on several devices, its device: 'cuda:1 · record g → node
    3 · generation 2'. A step of a CUDA graph made outside the trees names its graph, and neither
    a node nor a generation, which it does not have: 'replay graph 3 (batch 8) · ×300'."""
    rank, device = getattr(step, "rank", None), getattr(step, "device", None)
    text = (f"rank {rank} · " if rank is not None else "") + (f"{device} · " if device is not None else "")
    graph = getattr(step, "graph", None)
    if graph is not None:
        text += f"{step.kind} {step.function or f'graph {graph}'}"
    elif step.kind == "generation":  # the kind says it already: 'generation 3 begins'
        text += f"generation {step.generation} begins"
    else:
        text += step.kind + (f" {step.function}" if step.function else "")
        if step.node is not None:
            text += f" → node {step.node}"
        text += f" · generation {step.generation}"
    if step.repeat > 1:
        text += f" · ×{step.repeat}" + (f" (last {step.span} steps)" if step.span > 1 else "")
    return text


def time_line(entry: ProfileEntry | Mapping[str, Any]) -> str:
    """A node's times: '41 µs replay vs 180 µs eager: 4.4×'. `entry`: an entry of the trace's
    profile, typed (`cgviz.trace.profile.profile_entries`) or as the table keeps it
    (`trace.meta["profile"][node]`)."""
    if not isinstance(entry, ProfileEntry):
        entry = profile_entry("", entry)
    replay, eager = entry.replay_us, entry.eager_us
    first = " (its first call, with one-time setup)" if entry.eager_is_first_call else ""
    measured = entry.measured
    sim = "" if measured else " · CPU wall clock: sim, not a GPU"
    if replay is not None and eager is not None:
        # a ratio of CPU times is no speed-up: only CUDA-event times on a GPU get one
        ratio = f": {eager / replay:.1f}×" if replay > 0 and not first and measured else ""
        text = f"{format_us(replay)} replay vs {format_us(eager)} eager{first}{ratio}"
    elif replay is not None:
        text = f"{format_us(replay)} replay (no eager run timed)"
    elif eager is not None:
        text = f"{format_us(eager)} eager{first}" + ("; not replayed yet" if entry.kind == "graph" else "")
    else:
        return ""
    return text + sim


def kernel_label(name: str, width: int = 90) -> str:
    """A kernel's name made readable: no return type, parameter list or at::native:: prefixes,
    cut to `width` characters in the middle (kernels of one library share long beginnings and
    differ at the end: cuBLAS's split-K gemm from its plain one)."""
    text = name[5:] if name.startswith("void ") else name
    depth, cut = 0, len(text)
    for k, ch in enumerate(text):  # drop the parameter list: the first "(" outside template args
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and k > 0:
            cut = k
            break
    text = text[:cut].replace("at::native::", "").replace("(anonymous namespace)::", "")
    if len(text) <= width:
        return text
    tail = width // 3
    return text[: width - tail - 1] + "…" + text[-tail:]


def kernel_summary(kernels: list) -> str:
    """'5 nodes: 2 gemm kernels, ...' in one line: how many graph nodes, the most frequent first."""
    total = sum(count for _, count in kernels)
    top = sorted(kernels, key=lambda k: -k[1])[:3]
    parts = [f"{count}× {kernel_label(name, 48)}" for name, count in top]
    more = "" if len(kernels) <= 3 else f", +{len(kernels) - 3} more"
    return f"{plural(total, 'graph node')}: " + ", ".join(parts) + more
