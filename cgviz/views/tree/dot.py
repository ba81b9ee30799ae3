"""The tree as Graphviz DOT text, and Graphviz's `dot` run on it.

`to_dot` writes the same boxes, marks and colours as the built-in renderer, from the same
cards (`card.py`), as HTML-like labels; `graphviz_svg` runs `dot -Tsvg` and hands back SVG a
page can hold (no links out, no scripts), with the ids and classes `to_dot` gave.
"""

from __future__ import annotations

import functools
import re
import shutil
from typing import TYPE_CHECKING, Optional

from cgviz.views.svg_output import safe_svg
from cgviz.views.text import shown
from cgviz.views.tree.card import (
    EMPTY_TEXT, MARKS, SIZE_BADGE, SIZE_EDGE, SIZE_LEGEND, SIZE_MARK, SIZE_META, SIZE_OUTPUT, SIZE_TITLE, STYLE,
    Card, LegendItem, cards, edges, escape, legend_items, on_path_edges,
)

if TYPE_CHECKING:
    from cgviz.trace.model import Snapshot, Step


def _l(text: str) -> str:
    """Text for Graphviz's HTML-like labels: `escape`, and each backslash doubled (Graphviz reads
    `\\N`, `\\G`, `\\E`, ... in a label's text as the node's, graph's or edge's name)."""
    text = escape(text)
    return text.replace("\\", "\\\\") if "\\" in text else text


class _Html(str):
    """An HTML-like label cgviz wrote (`_q` writes it as it is; any other value is quoted)."""


def _font(text: str, size: float, color: str, bold: bool = False) -> str:
    body = _l(text)
    if bold:
        body = f"<B>{body}</B>"
    return f'<FONT POINT-SIZE="{size:g}" COLOR="{color}">{body}</FONT>'


_TEXT = str(STYLE["text"])
_MUTED = str(STYLE["muted"])


def _dot_label(card: Card) -> str:
    # The node's fontsize/fontcolor are the output lines' (SIZE_OUTPUT, the card's text colour).
    rows = ['<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">']
    for text, color in card.badges:
        rows.append(f"<TR><TD>{_font(text, SIZE_BADGE, color, bold=True)}</TD></TR>")
    rows.append(f'<TR><TD><FONT POINT-SIZE="{SIZE_TITLE:g}"><B>{_l(card.title)}</B></FONT></TD></TR>')
    muted = card.muted
    for line in card.meta:
        rows.append(f"<TR><TD>{_font(line, SIZE_META, muted)}</TD></TR>")
    for mark, mcolor, text, tcolor in card.outputs:
        body = _l(text) if tcolor == card.text_color else f'<FONT COLOR="{tcolor}">{_l(text)}</FONT>'
        if mark:
            # the gap goes with the mark, as a no-break space: graphviz writes each font run as
            # its own SVG <text>, and SVG would drop a space that starts one
            body = f'<FONT POINT-SIZE="{SIZE_MARK:g}" COLOR="{mcolor}"><B>{mark}</B>&#160;</FONT>{body}'
        rows.append(f'<TR><TD ALIGN="LEFT">{body}</TD></TR>')
    rows.append("</TABLE>>")
    return _Html("".join(rows))


def _dot_legend() -> str:
    fills, borders = legend_items()
    s = STYLE

    def cells(items: list[LegendItem]) -> str:
        out = []
        for label, fill, border, width, dashed in items:
            style = ' STYLE="dashed"' if dashed else ""
            bw = max(1, round(width))
            out.append(f'<TD BGCOLOR="{fill}" COLOR="{border}" BORDER="{bw}"{style} CELLPADDING="3">'
                       f"{_font(label, SIZE_LEGEND, _TEXT)}</TD>")
        return "".join(out)

    marks = "".join(
        f"<TD>{_font(MARKS[k], SIZE_MARK, str(s[k]), bold=True)}</TD><TD>{_font(k, SIZE_LEGEND, _TEXT)}</TD>"
        for k in ("live", "dead", "invalid")
    )
    row = '<TABLE BORDER="0" CELLSPACING="4" CELLPADDING="0"><TR><TD>{}</TD>{}</TR></TABLE>'
    row1 = row.format(_font("node:", SIZE_LEGEND, _MUTED), cells(fills))
    row2 = row.format(_font("border:", SIZE_LEGEND, _MUTED),
                      cells(borders) + f'<TD WIDTH="8"></TD><TD>{_font("outputs:", SIZE_LEGEND, _MUTED)}</TD>{marks}')
    return _Html(f'<<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="0"><TR><TD ALIGN="LEFT">{row1}</TD></TR>'
                 f'<TR><TD ALIGN="LEFT">{row2}</TD></TR></TABLE>>')


def _q(value: str) -> str:
    """A DOT attribute value: the HTML-like labels cgviz wrote (`_Html`) as they are, any other
    text double-quoted (backslashes and quotes escaped, control characters as `shown` writes
    them), so that no text makes a label of its own markup or another attribute."""
    if isinstance(value, _Html):
        return value
    return '"' + shown(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _stmt(head: str, attrs: dict[str, str]) -> str:
    return f"\t{head} [" + " ".join(f"{k}={_q(v)}" for k, v in attrs.items()) + "]\n"


def to_dot(
    snapshot: "Snapshot",
    step: Optional["Step"] = None,
    selected: Optional[int] = None,
    *,
    legend: bool = True,
) -> str:
    """The DOT source of the tree in `snapshot`, as it is after `step`.

    One node `n<id>` per tree node (with `id="node-<id>"` and `class` names from
    `node_state`), top-down, and an edge parent → child (`id="edge-<parent>-<child>"`)
    labelled with the child's function. `selected` outlines one node; `legend` puts the
    colour key above the tree.
    """
    import graphviz

    s = STYLE
    font = str(s["font"])
    dot = graphviz.Digraph(
        "cgviz_tree",
        graph_attr={
            "rankdir": "TB",
            "ordering": "out",
            "bgcolor": str(s["background"]),
            "fontname": font,
            "nodesep": "0.3",
            "ranksep": "0.45",
            "pad": "0.15",
            "id": "cgviz-tree",
            "class": "cgviz-tree",
        },
        node_attr={
            "shape": "box",
            "style": "rounded,filled",
            "fontname": font,
            "fontsize": f"{SIZE_OUTPUT:g}",
            "fontcolor": _TEXT,
            "margin": "0.1,0.06",
        },
        edge_attr={
            "fontname": font,
            "fontsize": f"{SIZE_EDGE:g}",
            "fontcolor": str(s["edge_label"]),
            "color": str(s["edge"]),
            "arrowsize": "0.7",
        },
    )
    if not snapshot.nodes:
        dot.node(
            "empty",
            label=EMPTY_TEXT,
            shape="note",
            style="filled",
            fillcolor=str(s["note_fill"]),
            color=_MUTED,
            fontcolor=_MUTED,
            fontsize="12",
            **{"id": "empty", "class": "cgviz-empty"},
        )
        return dot.source
    if legend:
        dot.attr(label=_dot_legend(), labelloc="t", labeljust="l")

    # Node and edge statements are written here rather than through Digraph.node/edge: the
    # same text, several times faster on large trees (the tree is redrawn at every step).
    body = dot.body
    for card in cards(snapshot, step, selected):
        attrs = {
            "id": f"node-{card.id}",
            "class": card.classes,
            "fillcolor": card.fill,
            "color": card.border,
            "penwidth": f"{card.width:g}",
        }
        if card.text_color != _TEXT:
            attrs["fontcolor"] = card.text_color
        if card.dashed:
            attrs["style"] = "rounded,filled,dashed"
        if card.selected:
            attrs["peripheries"] = "2"
        attrs["label"] = _dot_label(card)
        body.append(_stmt(f"n{card.id}", attrs))

    on_path = on_path_edges(snapshot)
    path_edge = {"class": "cgviz-edge on-path", "color": str(s["path_edge"]), "penwidth": f"{s['path_width']:g}"}
    for parent, child, function in edges(snapshot):
        attrs = {"id": f"edge-{parent}-{child}"}
        attrs.update(path_edge if (parent, child) in on_path else {"class": "cgviz-edge"})
        attrs["label"] = _Html(f"<{_l(function)}>")  # an HTML-like label: the name as text, whatever it holds
        body.append(_stmt(f"n{parent} -> n{child}", attrs))
    return dot.source


# -- SVG via Graphviz ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def dot_available() -> bool:
    """Whether Graphviz's `dot` (and the `graphviz` package) can be used; checked once."""
    try:
        import graphviz
    except ImportError:
        return False
    if shutil.which("dot"):
        return True
    try:
        graphviz.version()
        return True
    except Exception:
        return False


_ATTR_RE = re.compile(r'\b(id|class)="([^"]*)"')


class GraphvizError(RuntimeError):
    """Graphviz's `dot` could not draw a tree; the message says what it said (`problem`)."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(f"Graphviz's dot could not draw the tree: {problem}; renderer='builtin' draws it "
                         "without Graphviz")


def _dot_problem(exc: BaseException) -> str:
    """The first line `dot` wrote to stderr (or the error's own words), short and printable."""
    stderr = getattr(exc, "stderr", None)
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else str(stderr or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    words = lines[0] if lines else (str(exc) or type(exc).__name__)
    words = shown(words.removeprefix("Error: "))
    return words if len(words) <= 200 else words[:199] + "…"


@functools.lru_cache(maxsize=32)
def graphviz_svg(dot_source: str) -> str:
    """`dot -Tsvg` of the source; remembered, as stepping back and forth redraws the same trees.
    What comes back holds no link but to `#…` and no script or event handler (`safe_svg`);
    `dot` failing is a `GraphvizError`."""
    import graphviz

    try:
        out = graphviz.pipe("dot", "svg", dot_source.encode("utf-8"), quiet=True)  # what dot says goes in the error
    except (graphviz.CalledProcessError, graphviz.ExecutableNotFound, OSError) as exc:
        raise GraphvizError(_dot_problem(exc)) from None
    svg = out.decode("utf-8", "replace")
    start = svg.find("<svg")
    if start > 0:
        svg = svg[start:]  # drop the XML prolog and DOCTYPE: the SVG embeds in HTML as it is
    # graphviz writes '-' in ids as '&#45;'; write it plainly so "node-3" can be searched as text
    return safe_svg(_ATTR_RE.sub(lambda m: m.group(0).replace("&#45;", "-"), svg))


