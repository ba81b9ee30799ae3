"""Tree.explain(): the tree, the current path, live outputs and the last decisions, as text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cgviz.engine.node import Node, hexaddr
from cgviz.trace.profile import ProfileEntry, profile_entries
from cgviz.trace.words import kernel_summary, time_line

if TYPE_CHECKING:
    from cgviz.engine.tree import Tree

LAST_STEPS = 8


def _output_marks(node: Node) -> str:
    marks = []
    for i, leaf in enumerate(node.leaves):
        if i in node.invalid:
            state = "invalid"
        elif leaf.ref is None:
            state = f"alias of {leaf.alias_of}"
        else:
            state = "live" if leaf.ref.alive() else "dead"
        shape = "×".join(str(s) for s in leaf.shape) or "scalar"
        marks.append(f"{i}:{state} {leaf.dtype}[{shape}]")
    return ", ".join(marks) or "no tensor outputs"


def _describe(node: Node, on_path: set[int]) -> str:
    marker = "▶ " if node.id in on_path else ""
    extra = (f"{node.replays} replay" + ("" if node.replays == 1 else "s")) if node.kind == "graph" else "warmup (eager)"
    return f"{marker}node {node.id} {node.variant.label} [{extra}, generation {node.generation}] outputs: {_output_marks(node)}"


def _lines(node: Node, prefix: str, last: bool, on_path: set[int], out: list[str]) -> None:
    out.append(f"{prefix}{'└── ' if last else '├── '}{_describe(node, on_path)}")
    children = node.child_list()
    for k, child in enumerate(children):
        _lines(child, prefix + ("    " if last else "│   "), k == len(children) - 1, on_path, out)


def render_tree(tree: "Tree") -> str:
    """The node tree as indented text; ▶ marks the current path."""
    on_path = {n.id for n in tree.current.path} if tree.current is not None else set()
    roots = [n for n in tree.nodes if n.parent is None]
    out = ["roots"]
    for k, root in enumerate(roots):
        _lines(root, "", k == len(roots) - 1, on_path, out)
    if not roots:
        out.append("└── (empty: no function has run yet)")
    return "\n".join(out)


def _profile_lines(entries: list[ProfileEntry]) -> list[str]:
    """Each recorded graph's times and kernels (Tree(profile=True))."""
    out = []
    for entry in entries:
        if entry.kind != "graph":
            continue
        parts = [p for p in (time_line(entry), kernel_summary(entry.kernels) if entry.kernels else "") if p]
        if parts:
            out.append(f"  node {entry.node} {entry.function}: " + " · ".join(parts))
    return ["profile:"] + out if out else []


def explain(tree: "Tree") -> str:
    label = f" {tree.name!r}" if tree.name else ""
    lines = [f"cgviz tree{label} on {tree.backend.name} · generation {tree.generation} · state {tree.state}"]
    if tree.current is None:
        lines.append("current path: none (the next call starts from the roots)")
    else:
        lines.append("current path: " + " → ".join(f"{n.id} ({n.variant.label})" for n in tree.current.path))
        live = [
            f"output {i} of node {n.id} ({n.variant.label}) at {hexaddr(n.leaves[i].address)}"
            for n in tree.current.path
            for i in n.live_outputs()
        ]
        nothing = "none (the next call starts from the roots unless a graph under the current node takes it)"
        lines.append("live outputs: " + ("; ".join(live) if live else nothing))
    if tree.pending_backward:
        lines.append(f"pending backwards: {tree.pending_backward}")
    eager = [v.eager_reason for v in tree._variants if v.eager_reason]
    eager += [why for why in tree._mutation_hints.values() if why is not None]
    for why in eager:
        lines.append(f"eager: {why}")
    lines.append(render_tree(tree))
    lines += _profile_lines(profile_entries(tree.trace.meta))
    steps = tree.trace.steps[-LAST_STEPS:]
    if steps:
        lines.append("last decisions:")
        for s in steps:
            lines.append(f"  step {s.index + 1}: {s.headline()}")  # counted from 1, as the explorer does
            lines.append(f"      why: {s.reason}")
    elif tree.trace_level is None:
        lines.append("(trace=None: decisions are not recorded)")
    return "\n".join(lines)
