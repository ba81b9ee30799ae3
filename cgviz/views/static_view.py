"""The Explorer at one step as plain HTML: its headline, the tree and the pool, and the list of
CUDA graphs made outside the trees where the trace holds any (the step's graph marked). A
notebook keeps it beside the widget, so that where widgets do not run (nbconvert's HTML, GitHub,
nbviewer, a docs page, JupyterLab before the notebook runs) the reader still sees the step the
widget showed.

The drawings are images of their SVG (`svg_image`), not SVG inline: JupyterLab shows an
untrusted notebook's HTML outputs (one opened before it ran, as on Binder) through its
sanitizer, which keeps an image and strips inline SVG, leaving only the drawing's words."""

from __future__ import annotations

import base64
import html
from typing import TYPE_CHECKING

from cgviz.trace.model import GRAPH_STEP_KINDS
from cgviz.views.graph_list import graph_list_html
from cgviz.views.text import GRAPH_STEP_NOTE, GRAPHS_ONLY, headline

if TYPE_CHECKING:
    from cgviz.trace.model import Trace

STILL_CLASS = "cgviz-still"
# a still picture is drawn and sent with every Explorer shown: a tree larger than this is left to
# the Explorer itself (a 1,000-node tree's picture takes about 0.3 s and 1.4 MB)
STILL_MAX_NODES = 300


def static_html(trace: "Trace", index: int, mark: str = "") -> str:
    """Step `index` (counted from 0) of `trace` as HTML, its drawings SVG images; no script, no
    style sheet it depends on. `mark`: one more class, by which a running widget finds it."""
    from cgviz.views.pool import pool_svg
    from cgviz.views.tree import tree_svg

    classes = f"{STILL_CLASS} {mark}".strip()
    n = len(trace.steps)
    if not n:
        return f'<div class="{classes}"><p>cgviz Explorer: the trace has no steps yet.</p></div>'
    index = max(0, min(index, n - 1))
    step = trace.steps[index]
    parts = [
        f'<div class="{classes}" style="font-family: sans-serif; max-width: 100%; overflow-x: auto">',
        f"<p><b>step {index + 1}/{n}</b> · {html.escape(headline(step))}</p>",
        f'<p style="margin: 0 0 8px 0">{html.escape(step.reason)}</p>',
    ]
    snapshot = step.snapshot
    if snapshot is None:
        parts.append(f"<p><i>{html.escape(_no_tree(trace, index))}</i></p>")
    else:
        if len(snapshot.nodes) > STILL_MAX_NODES:
            parts.append(f"<p><i>The tree has {len(snapshot.nodes)} nodes: too many for a still picture (at most "
                         f"{STILL_MAX_NODES}); run the notebook to see it in the Explorer.</i></p>")
        else:
            parts.append(f"<div>{svg_image(tree_svg(snapshot, step), f'the tree after step {index + 1}')}</div>")
        parts.append(f"<div>{svg_image(pool_svg(snapshot), f'the pool after step {index + 1}')}</div>")
    parts.append(graph_list_html(trace, step.graph, inline=True))
    parts.append("<p><small>A still picture of the Explorer at this step; run the notebook to step "
                 "through the trace.</small></p></div>")
    return "".join(parts)


def _no_tree(trace: "Trace", index: int) -> str:
    """What stands where the tree would be, at a step with no snapshot."""
    if all(s.kind in GRAPH_STEP_KINDS for s in trace.steps):
        return GRAPHS_ONLY
    if trace.steps[index].graph is not None:
        return GRAPH_STEP_NOTE
    return "No snapshot was recorded for this step."


def svg_image(svg: str, alt: str) -> str:
    """An SVG drawing as an HTML image (a data URL) at its own size, never wider than its place."""
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return (f'<img src="data:image/svg+xml;base64,{data}" alt="{html.escape(alt)}" '
            'style="max-width: 100%; height: auto">')
