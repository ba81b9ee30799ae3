"""The built-in renderer's SVG: a tree drawn from its cards (`card.py`) at the places the
built-in layout gives (`layout.py`), with no Graphviz.

Each node is a group `id="node-<id>"` moved into place, each edge a group
`id="edge-<parent>-<child>"` with an elbow, an arrowhead and a label; the page's tree frames
draw their groups with the same pieces (`node_inner`, `edge_inner`, `svg_lines`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

from cgviz.views.text import shown
from cgviz.views.tree.card import (
    EMPTY_TEXT, LINE_BADGE, LINE_META, LINE_OUTPUT, LINE_TITLE, MARKS, PAD_X, PAD_Y, SIZE_BADGE, SIZE_EDGE,
    SIZE_LEGEND, SIZE_MARK, SIZE_META, SIZE_OUTPUT, SIZE_TITLE, STYLE, Card, card_size, cards, edges, escape,
    legend_items, on_path_edges, text_width,
)
from cgviz.views.tree.layout import LEVEL_GAP, MARGIN, Box, boxes

if TYPE_CHECKING:
    from cgviz.trace.model import Snapshot, Step

#: An edge's stroke, plain and on the current path, and its label's text (the page's tree
#: frames hold both strokes in each edge, so they take these apart).
PLAIN_STROKE = f' stroke="{STYLE["edge"]}" fill="{STYLE["edge"]}" stroke-width="1.3"'
PATH_STROKE = f' stroke="{STYLE["path_edge"]}" fill="{STYLE["path_edge"]}" stroke-width="{STYLE["path_width"]:g}"'
ROUND_JOIN = ' stroke-linejoin="round"'
EDGE_TEXT = f' font-size="{SIZE_EDGE:g}" text-anchor="middle"'
_PLAIN_EDGE = PLAIN_STROKE + EDGE_TEXT
_PATH_EDGE = PATH_STROKE + EDGE_TEXT + ROUND_JOIN


def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _svg_text(x: float, y: float, size: float, color: str, body: str, anchor: str = "middle",
              bold: bool = False) -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (f'<text x="{_f(x)}" y="{_f(y)}" font-size="{size:g}" fill="{color}" '
            f'text-anchor="{anchor}"{weight}>{body}</text>')


def svg_legend(x0: float, y0: float) -> tuple[list[str], float, float]:
    """The legend's SVG elements at (x0, y0) and its width and height."""
    fills, borders = legend_items()
    s = STYLE
    parts = ['<g id="legend" class="cgviz-legend">']
    size = SIZE_LEGEND
    row_h = 22.0
    width = 0.0
    for r, (head, items) in enumerate((("node:", fills), ("border:", borders))):
        y = y0 + r * row_h
        x = x0
        parts.append(_svg_text(x, y + 14, size, str(s["muted"]), escape(head), anchor="start"))
        x += 46
        for label, fill, border, bw, dashed in items:
            tw = text_width(label, size) + 12
            dash = ' stroke-dasharray="4 2"' if dashed else ""
            parts.append(f'<rect x="{_f(x)}" y="{_f(y + 2)}" width="{_f(tw)}" height="17" rx="3" fill="{fill}" '
                         f'stroke="{border}" stroke-width="{bw:g}"{dash}/>')
            parts.append(_svg_text(x + tw / 2, y + 14.5, size, str(s["text"]), escape(label)))
            x += tw + 6
        if r == 1:
            x += 8
            parts.append(_svg_text(x, y + 14, size, str(s["muted"]), "outputs:", anchor="start"))
            x += text_width("outputs:", size) + 6
            for k in ("live", "dead", "invalid"):
                parts.append(_svg_text(x, y + 14.5, SIZE_MARK, str(s[k]), MARKS[k], anchor="start", bold=True))
                x += text_width(MARKS[k], SIZE_MARK, True) + 3
                parts.append(_svg_text(x, y + 14, size, str(s["text"]), k, anchor="start"))
                x += text_width(k, size) + 10
        width = max(width, x - x0)
    return parts + ["</g>"], width, 2 * row_h


def builtin_tree_svg(
    snapshot: "Snapshot",
    step: Optional["Step"] = None,
    selected: Optional[int] = None,
    *,
    legend: bool = True,
    notice: Optional[str] = None,
) -> str:
    """The tree as SVG, laid out in pure Python (no Graphviz needed).

    The same boxes, marks, colours and edge labels as `to_dot`, top-down: children
    centred under their parent, subtrees side by side without overlap. Each node is
    `<g id="node-<id>" class="cgviz-node ..." data-node="<id>">`, each edge
    `<g id="edge-<parent>-<child>" class="cgviz-edge ...">`. `notice` adds one line of
    small text at the top.
    """
    s = STYLE
    head: list[str] = []
    y = MARGIN
    width = 0.0
    if notice:
        head.append(f'<text class="cgviz-notice" x="{_f(MARGIN)}" y="{_f(y + 10)}" font-size="10" '
                    f'fill="{s["muted"]}" font-style="italic">{escape(notice)}</text>')
        width = max(width, text_width(notice, 10) + 2 * MARGIN)
        y += 20
    if not snapshot.nodes:
        w = text_width(EMPTY_TEXT, 12) + 28
        body = [
            f'<g id="empty" class="cgviz-empty">'
            f'<rect x="{_f(MARGIN)}" y="{_f(y)}" width="{_f(w)}" height="34" rx="4" fill="{s["note_fill"]}" '
            f'stroke="{s["muted"]}" stroke-width="1"/>'
            + _svg_text(MARGIN + w / 2, y + 21, 12, str(s["muted"]), escape(EMPTY_TEXT)) + "</g>"
        ]
        width = max(width, w + 2 * MARGIN)
        return _svg_doc(width, y + 34 + MARGIN, head + body)
    if legend:
        parts, lw, lh = svg_legend(MARGIN, y)
        head.extend(parts)
        width = max(width, lw + 2 * MARGIN)
        y += lh + 16

    drawn = cards(snapshot, step, selected)
    sizes = {c.id: card_size(c) for c in drawn}
    box, depth, right, height = boxes([c.id for c in drawn], sizes, snapshot, y)
    width = max(width, right + MARGIN)
    by_id = {c.id: c for c in drawn}

    # edges: elbows from the parent's bottom to the child's top, the label over the child's drop
    on_path = on_path_edges(snapshot)
    edges_plain: list[str] = []
    edges_path: list[str] = []
    for parent, child, function in edges(snapshot):
        if parent not in box or child not in box or depth[child] != depth[parent] + 1:
            continue
        hot = (parent, child) in on_path
        inner = edge_inner(box[parent], box[child], function, hot, by_id[child].selected)
        (edges_path if hot else edges_plain).append(
            f'<g id="edge-{parent}-{child}" class="cgviz-edge{" on-path" if hot else ""}" '
            f'data-parent="{parent}" data-child="{child}"{_PATH_EDGE if hot else _PLAIN_EDGE}>{inner}</g>'
        )

    # nodes: a group per node, moved into place; text inherits size, colour and anchor from it
    nodes: list[str] = []
    for c in drawn:
        x0, y0, w, h = box[c.id]
        ring = (f'<rect x="-4" y="-4" width="{w + 8:.1f}" height="{h + 8:.1f}" rx="8" fill="none" '
                f'stroke="{c.border}" stroke-width="{c.width:g}"/>' if c.selected else "")
        nodes.append(
            f'<g id="node-{c.id}" class="{c.classes}" data-node="{c.id}" transform="translate({x0:.1f},{y0:.1f})" '
            f'font-size="{SIZE_META:g}" fill="{c.muted}" text-anchor="middle">'
            f"<title>{escape(c.title)} (node {c.id})</title>{ring}{node_inner(c, f'{w:.1f}', f'{w / 2:.1f}', h)}</g>"
        )

    return _svg_doc(width, height, head + ['<g class="cgviz-edges">'] + edges_plain + edges_path + ["</g>"] + nodes)


def node_inner(c: Card, w: str, cx: str, h: float) -> str:
    """A node box's rectangle and texts, relative to its group; `w` and `cx` (its width and
    centre) come formatted, so a page can draw the same box at a width it chooses later."""
    dash = ' stroke-dasharray="5 3"' if c.dashed else ""
    parts = [f'<rect width="{w}" height="{h:.1f}" rx="6" fill="{c.fill}" stroke="{c.border}" '
             f'stroke-width="{c.width:g}"{dash}/>']
    ty = PAD_Y
    for text, color in c.badges:
        parts.append(f'<text x="{cx}" y="{ty + 10:.1f}" font-size="{SIZE_BADGE:g}" font-weight="bold" '
                     f'fill="{color}">{escape(text)}</text>')
        ty += LINE_BADGE
    parts.append(f'<text x="{cx}" y="{ty + 14:.1f}" font-size="{SIZE_TITLE:g}" font-weight="bold" '
                 f'fill="{c.text_color}">{escape(c.title)}</text>')
    ty += LINE_TITLE
    for line in c.meta:
        parts.append(f'<text x="{cx}" y="{ty + 9.5:.1f}">{escape(line)}</text>')
        ty += LINE_META
    ty += 3
    for mark, mcolor, text, tcolor in c.outputs:
        mark_span = (f'<tspan fill="{mcolor}" font-weight="bold" font-size="{SIZE_MARK:g}">{mark}</tspan> '
                     if mark else "")
        parts.append(f'<text x="{PAD_X:g}" y="{ty + 10.5:.1f}" text-anchor="start" font-size="{SIZE_OUTPUT:g}" '
                     f'fill="{tcolor}">{mark_span}{escape(text)}</text>')
        ty += LINE_OUTPUT
    return "".join(parts)


def edge_inner(pbox: Box, cbox: Box, function: str, hot: bool, selected: bool = False) -> str:
    """An edge's elbow, arrowhead and label from a parent's box to a child's (x, y, w, h); the
    label is `function` as `shown` writes it (one line, whatever the name holds)."""
    function = shown(function)
    px, py, pw, ph = pbox
    cx, cy, cw, _ = cbox
    x1, y1 = px + pw / 2, py + ph
    x2, y2 = cx + cw / 2, cy - (4 if selected else 0)  # to the outer ring if selected
    ye = cy - LEVEL_GAP + 15
    ah, al = (5.5, 10.0) if hot else (4.0, 7.0)  # arrowhead half-width and length
    if abs(x1 - x2) < 0.5:
        d = f"M{x1:.1f},{y1:.1f}V{y2 - al + 1:.1f}"
    else:
        r = min(6.0, abs(x2 - x1) / 2)
        sx = r if x2 > x1 else -r
        d = (f"M{x1:.1f},{y1:.1f}V{ye - r:.1f}Q{x1:.1f},{ye:.1f} {x1 + sx:.1f},{ye:.1f}"
             f"H{x2 - sx:.1f}Q{x2:.1f},{ye:.1f} {x2:.1f},{ye + r:.1f}V{y2 - al + 1:.1f}")
    lw = text_width(function, SIZE_EDGE) + 8
    ly = cy - 18
    return (f'<path d="{d}" fill="none"/>'
            f'<path d="M{x2 - ah:.1f},{y2 - al:.1f}L{x2:.1f},{y2:.1f}L{x2 + ah:.1f},{y2 - al:.1f}Z" stroke="none"/>'
            f'<rect x="{x2 - lw / 2:.1f}" y="{ly - 7:.1f}" width="{lw:.1f}" height="13" rx="2" '
            f'fill="{STYLE["background"]}" stroke="none"/>'
            f'<text x="{x2:.1f}" y="{ly + 3.5:.1f}" stroke="none" fill="{STYLE["edge_label"]}">'
            f"{escape(function)}</text>")


def _svg_doc(width: float, height: float, body: Iterable[str]) -> str:
    """An SVG document of `body`'s elements on the tree's background."""
    return "\n".join(svg_lines(width, height, list(body)))


def svg_lines(width: float, height: float, body: list[str]) -> list[str]:
    """`_svg_doc`'s lines, for a caller that stores drawings as lines (no join to split again)."""
    s = STYLE
    w, h = _f(width), _f(height)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f'font-family="{s["font"]}" class="cgviz-tree" id="cgviz-tree">'
            f'<rect class="cgviz-background" x="0" y="0" width="{w}" height="{h}" fill="{s["background"]}"/>')
    if len(body) < 2:
        return [head + "".join(body) + "</svg>"]
    return [head + body[0], *body[1:-1], body[-1] + "</svg>"]
