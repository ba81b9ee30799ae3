"""The pool view as a matplotlib Figure: segment bars, their blocks and names, titles, legend.

It draws exactly the rectangles of `pool_blocks`, as a few `PolyCollection`s, not one artist
per block, with hatching as one `LineCollection` of stripes per category. Block names are
written only where they fit, at most `_MAX_BLOCK_LABELS` of them: text is the expensive part
of drawing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

from cgviz.views.pool_geometry import (
    WIDENED_NOTE,
    block_labels,
    pool_blocks,
    pool_subtitle,
    pool_title,
    pool_title_of,
    pool_totals,
    segment_label,
)
from cgviz.views.pool_legend import draw_legend, legend_entries, legend_height_in
from cgviz.views.pool_shapes import FONT, rect_verts, stripe_collection
from cgviz.views.style import EDGE_COLOR, FREE_COLOR, HIGHLIGHT_EDGE, MUTED_TEXT, TEXT_COLOR, text_color_on
from cgviz.views.svg_output import literal_texts, svg_artists

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from cgviz.trace.model import Snapshot

_BAR_HEIGHT = 0.62  # of a row
_MAX_BLOCK_LABELS = 150  # text is the expensive part of drawing: label the widest first
_FADED_ALPHA = 0.3  # blocks of other nodes when one node is highlighted


class _Layout(NamedTuple):
    """Where things go, in inches: labels | bars | legend, titles on top, footnote below."""

    width_in: float
    height_in: float
    left_in: float  # the bars start here
    top_in: float  # the bars start this far below the top
    axis_w_in: float  # the bars' length
    rows_in: float  # the bars' rows, together
    seg_labels: list[str]
    label_pt: float
    footnote: bool


def _layout(segments: list, blocks: list[dict], entries: list[tuple],
            figsize: Optional[tuple[float, float]]) -> _Layout:
    nseg = len(segments)
    compact = nseg > 24  # one-line segment labels, thinner rows
    row_in = 0.46 if not compact else max(0.12, min(0.24, 16.0 / nseg))
    used = [sum(b.size for b in s.blocks if b.allocated) for s in segments]
    seg_labels = [segment_label(s.address, s.kind, s.size, u, compact) for s, u in zip(segments, used)]
    label_pt = 7.5 if not compact else 6.5
    legend_chars = max((len(line) for e in entries for line in e[0].split("\n")), default=0)
    label_in = max((len(line) for t in seg_labels for line in t.split("\n")), default=0) * label_pt * 0.6 / 72
    left_in = 0.2 + label_in
    right_in = 0.45 + legend_chars * FONT * 0.52 / 72
    top_in = 0.62
    footnote = any(d["widened"] for d in blocks)
    foot_in = 0.28 if footnote else 0.0
    width_in, height_in = figsize if figsize else (10.0, 0.0)
    if not figsize:
        height_in = top_in + max(nseg * row_in + foot_in, legend_height_in(entries)) + 0.12
    squeeze = min(1.0, 0.7 * width_in / (left_in + right_in))  # a narrow figure: keep bars wide
    left_in, right_in = left_in * squeeze, right_in * squeeze
    rows_in = max(0.1, min(nseg * row_in, height_in - top_in - foot_in - 0.12))
    return _Layout(width_in, height_in, left_in, top_in, width_in - left_in - right_in, rows_in, seg_labels,
                   label_pt, footnote)


def _bars_axes(fig: "Figure", box: _Layout, nseg: int):
    """The axes of the bars: x is the fraction of a segment's bar, y the row (0 on top)."""
    ax = fig.add_axes((box.left_in / box.width_in, 1 - (box.top_in + box.rows_in) / box.height_in,
                       box.axis_w_in / box.width_in, box.rows_in / box.height_in))
    ax.set_gid("pool-axes")
    ax.set_xlim(0, 1)
    ax.set_ylim(nseg - 0.5, -0.5)
    ax.set_axis_off()
    return ax


def _draw_segments(ax, box: _Layout) -> None:
    """Each segment's label left of its row, and its bar's outline (gid ``pool-segments``)."""
    import numpy as np

    Rects, _, Label = svg_artists()
    nseg = len(box.seg_labels)
    to_left = ax.get_yaxis_transform()  # x in axes fraction, y in rows
    for row, label in enumerate(box.seg_labels):
        ax.add_artist(Label(-0.06 / box.axis_w_in, row, label, transform=to_left, ha="right", va="center",
                            fontsize=box.label_pt, color=TEXT_COLOR, family="monospace", linespacing=1.3,
                            clip_on=False))
    h = _BAR_HEIGHT / 2
    rows = np.arange(nseg, dtype=float)
    outline = Rects(rect_verts(np.zeros(nseg), np.ones(nseg), rows - h, rows + h), facecolors=FREE_COLOR,
                    edgecolors="#adb5bd", linewidths=0.8, zorder=1)
    outline.set_gid("pool-segments")
    ax.add_collection(outline)


def _draw_blocks(ax, box: _Layout, blocks: list[dict], highlight_node: Optional[int]) -> None:
    """The blocks, one collection per category (gid ``pool-blocks-<category>``, each block
    linked to ``#block-<address in hex>``), and stripes over the hatched ones in a darker
    shade of each block's colour (gid ``pool-hatch-<category>``)."""
    import numpy as np
    from matplotlib.colors import to_rgba_array

    Rects, _, _ = svg_artists()
    h = _BAR_HEIGHT / 2
    row_in = box.rows_in / len(box.seg_labels)
    for category in ("free", "output", "input", "unowned"):
        items = [d for d in blocks if d["category"] == category]
        if not items:
            continue
        x0 = np.array([d["x"] for d in items])
        x1 = x0 + np.array([d["width"] for d in items])
        y = np.array([d["segment"] for d in items], dtype=float)
        faces = to_rgba_array([d["color"] for d in items])
        edges, widths = to_rgba_array(EDGE_COLOR), 0.5
        if highlight_node is not None and category != "free":
            mine = np.array([d["node"] == highlight_node for d in items])
            faces[~mine, 3] = _FADED_ALPHA
            edges = np.where(mine[:, None], to_rgba_array(HIGHLIGHT_EDGE), edges)
            widths = np.where(mine, 1.8, 0.5)
        coll = Rects(rect_verts(x0, x1, y - h, y + h), facecolors=faces, edgecolors=edges, linewidths=widths,
                     zorder=2)
        coll.set_gid(f"pool-blocks-{category}")
        coll.set_urls([f"#block-{d['address']:x}" for d in items])
        ax.add_collection(coll)
        if items[0]["hatch"]:
            shade = faces.copy()
            shade[:, :3] *= 0.55
            inches = np.stack([x0 * box.axis_w_in, x1 * box.axis_w_in, (y - h) * row_in, (y + h) * row_in], 1)
            stripes = stripe_collection(inches, shade, items[0]["hatch"], f"pool-hatch-{category}",
                                         (box.axis_w_in, row_in))
            if stripes is not None:
                ax.add_collection(stripes)


def _draw_block_labels(ax, box: _Layout, blocks: list[dict], highlight_node: Optional[int]) -> None:
    """Names inside the blocks wide enough for one, widest first, at most `_MAX_BLOCK_LABELS`
    (in a PNG each costs a millisecond or more); which fit is worked out from the font size,
    not measured."""
    _, _, Label = svg_artists()
    char_in = 0.56 * FONT / 72
    line_in = 1.2 * FONT / 72
    max_lines = int(_BAR_HEIGHT * box.rows_in / len(box.seg_labels) / line_in)
    if max_lines < 1:
        return
    labelled = 0
    for d in sorted(blocks, key=lambda d: -d["width"]):
        avail = d["width"] * box.axis_w_in - 0.06
        if avail < char_in or labelled >= _MAX_BLOCK_LABELS:
            break
        text = next((t for t in block_labels(d)
                     if t.count("\n") < max_lines and max(map(len, t.split("\n"))) * char_in <= avail), None)
        if text is None:
            continue
        color = MUTED_TEXT if d["category"] == "free" else text_color_on(d["color"])
        if highlight_node is not None and d["category"] != "free" and d["node"] != highlight_node:
            color = MUTED_TEXT
        box_style = None
        if d["hatch"]:  # text over stripes: on a quiet patch
            box_style = {"boxstyle": "round,pad=0.15", "facecolor": "#ffffff", "edgecolor": "none", "alpha": 0.85}
            color = TEXT_COLOR
        ax.add_artist(Label(d["x"] + d["width"] / 2, d["segment"], text, ha="center", va="center", fontsize=FONT,
                            color=color, clip_on=True, zorder=3, linespacing=1.0, bbox=box_style))
        labelled += 1


def _draw_titles(fig: "Figure", box: _Layout, totals: dict[str, int]) -> None:
    """The totals on top (gid ``pool-title``), what is shown under them, the footnote."""
    x = box.left_in / box.width_in
    fig.suptitle(pool_title_of(totals), x=x, ha="left", y=1 - 0.12 / box.height_in, va="top", fontsize=10,
                 color=TEXT_COLOR, gid="pool-title")
    fig.text(x, 1 - 0.36 / box.height_in, pool_subtitle(totals), fontsize=7.5, color=MUTED_TEXT, va="top")
    if box.footnote:
        fig.text(x, 1 - (box.top_in + box.rows_in + 0.08) / box.height_in, WIDENED_NOTE,
                 fontsize=7, color=MUTED_TEXT, va="top", style="italic")


def _empty_figure(snapshot: Optional["Snapshot"], figsize, message: str) -> "Figure":
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize or (8.0, 1.6))
    ax = fig.add_axes((0, 0, 1, 0.75))
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=10, color=MUTED_TEXT, transform=ax.transAxes)
    fig.suptitle(pool_title(snapshot), fontsize=10, color=TEXT_COLOR, y=0.94, gid="pool-title")
    fig.cgviz_blocks = []  # type: ignore[attr-defined]
    return fig


def pool_figure(
    snapshot: Optional["Snapshot"],
    *,
    highlight_node: Optional[int] = None,
    figsize: Optional[tuple[float, float]] = None,
) -> "Figure":
    """The pool of `snapshot` as a matplotlib Figure (made directly, no pyplot state).

    `highlight_node` outlines that node's blocks and fades the other nodes' blocks. The
    drawn blocks are `pool_blocks(snapshot)`, also kept as ``fig.cgviz_blocks``; the
    block collections carry gid ``pool-blocks-<category>`` and each block the URL
    ``#block-<address in hex>`` (turned into SVG group ids by `figure_svg`). The legend's
    texts carry gid ``pool-legend-text-<k>``, the title ``pool-title``.
    """
    from matplotlib.figure import Figure

    if snapshot is None:
        message = "no pool snapshot for this step (trace level 'events')"
        return literal_texts(_empty_figure(snapshot, figsize, message))
    if not snapshot.segments:
        message = "pool is empty: nothing allocated in the tree's pool yet"
        return literal_texts(_empty_figure(snapshot, figsize, message))
    segments = sorted(snapshot.segments, key=lambda s: s.address)
    blocks = pool_blocks(snapshot)
    entries = legend_entries(snapshot, {d["node"] for d in blocks if d["node"] is not None},
                             {d["category"] for d in blocks}, highlight_node)
    box = _layout(segments, blocks, entries, figsize)
    fig = Figure(figsize=(box.width_in, box.height_in))
    ax = _bars_axes(fig, box, len(segments))
    _draw_segments(ax, box)
    _draw_blocks(ax, box, blocks, highlight_node)
    _draw_block_labels(ax, box, blocks, highlight_node)
    draw_legend(fig, entries, box.left_in + box.axis_w_in * 1.02, box.top_in)
    _draw_titles(fig, box, pool_totals(snapshot))
    fig.cgviz_blocks = blocks  # type: ignore[attr-defined]
    return literal_texts(fig)  # names from the trace drawn as they are: "$x^2$" is no formula
