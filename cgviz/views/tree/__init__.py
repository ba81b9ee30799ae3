"""The tree view: a snapshot's tree as graphviz DOT, and as SVG.

    dot = to_dot(snapshot, step)          # DOT source (the `graphviz` package builds it)
    svg = tree_svg(snapshot, step)        # SVG: Graphviz's `dot` when installed, else built in
    svg = builtin_tree_svg(snapshot)      # SVG laid out here, in pure Python

Every tree node is one box, top-down from the roots: its function, its node id, kind,
generation and replay count, and its outputs as marks (● live, ○ dead, ✕ invalid) with
shape and size. The fill says what the node is (warmup, recorded graph, touched by this
step, invalidated); the border says where the current path is (on the path, the current
node, the selected node). An edge goes from a parent to each child and is labelled with
the child's function: the function that branched there.

Both renderers draw the same boxes, marks and colours (`STYLE`), and both give each
node's SVG group `id="node-<id>"` and each edge's `id="edge-<parent>-<child>"`, with
`class` names from `node_state`, so a page can find and style them.
"""

from __future__ import annotations

import functools
import html
import re
import shutil
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate, chain, compress, count, repeat, zip_longest
from operator import add, is_not, itemgetter, sub
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

from cgviz.views.text import format_bytes, shown
from cgviz.views.style import TREE_STYLE

if TYPE_CHECKING:
    from cgviz.trace.model import NodeView, OutputView, Snapshot, Step

__all__ = [
    "STYLE",
    "MARKS",
    "node_state",
    "to_dot",
    "tree_svg",
    "builtin_tree_svg",
    "dot_available",
    "GRAPHVIZ_MISSING_NOTICE",
    "GraphvizError",
]

#: Colours and widths shared by the DOT and the built-in renderer (the palette's tree part).
STYLE = TREE_STYLE

#: The mark of an output in each state.
MARKS: dict[str, str] = {"live": "●", "dead": "○", "invalid": "✕"}

# Graphviz lays out a 1,000-node tree in about 0.5 s, the built-in layout in about 25 ms: past
# this size "auto" keeps stepping through a trace under 100 ms per step.
AUTO_GRAPHVIZ_MAX_NODES = 200
LARGE_TREE_NOTICE = (
    "{nodes} nodes: built-in layout (Graphviz is used up to {limit} nodes; renderer='graphviz' uses it anyway)"
)
GRAPHVIZ_MISSING_NOTICE = (
    "Graphviz not found: built-in layout (install graphviz: apt install graphviz / "
    "brew install graphviz / conda install graphviz)"
)

#: The built-in layout's notice where `dot` failed on a tree ("auto"); {problem}: what it said.
GRAPHVIZ_FAILED_NOTICE = "Graphviz's dot could not draw this tree ({problem}): built-in layout"

EMPTY_TEXT = "no functions have run yet"

# at most this many output lines in a box; the rest are summed up in one line
MAX_OUTPUT_LINES = 8
# signatures longer than this are cut with "…"
MAX_SIGNATURE = 44

# font sizes, shared by both renderers (points in DOT, pixels in the built-in SVG)
_SIZE_BADGE = 9.5
_SIZE_TITLE = 13.0
_SIZE_META = 9.5
_SIZE_OUTPUT = 10.0
_SIZE_MARK = 11.5
_SIZE_EDGE = 9.5
_SIZE_LEGEND = 10.0

# what a step did to the node it names: (state, badge text, alert?)
_STEP_BADGES: dict[str, tuple[str, str, bool]] = {
    "warmup": ("warming", "▶ warming up now", False),
    "record": ("recording", "★ just recorded", False),
    "execute": ("replaying", "▶ replaying now", False),
    "checkpoint_restore": ("restored", "↺ allocator restored here", False),
    "eager": ("eager", "eager run here", False),
    "error": ("error", "⚠ error here", True),
}


# -- what a node is ------------------------------------------------------------------------------
def node_state(snapshot: "Snapshot", node_id: int, step: Optional["Step"] = None) -> set[str]:
    """The states of node `node_id` after `step`, as class-name words.

    Always the kind ("warmup" or "graph"); then any of "on-path" (on the current path),
    "current" (the current node), "active" (the node `step` ran, with what it did:
    "warming", "recording", "replaying", "restored", "eager", "error"), "invalidated"
    (an output is invalid) and "invalidated-now" (`step` is the generation step that
    invalidated it).
    """
    node = snapshot.node(node_id)
    return _node_state(snapshot, node, step, set(snapshot.path), _invalidated_now(step))


def _invalidated_now(step: Optional["Step"]) -> set[int]:
    if step is None or not step.invalidated:
        return set()
    return {pair[0] for pair in step.invalidated}


def _node_state(
    snapshot: "Snapshot", node: "NodeView", step: Optional["Step"], path: set[int], inval_now: set[int]
) -> set[str]:
    states = {node.kind}
    if node.id in path:
        states.add("on-path")
    if snapshot.current_node == node.id:
        states.add("current")
    if step is not None and step.node == node.id and step.kind in _STEP_BADGES:
        states.add("active")
        states.add(_STEP_BADGES[step.kind][0])
    for out in node.outputs:
        if out.state == "invalid":
            states.add("invalidated")
            break
    if node.id in inval_now:
        states.add("invalidated")
        states.add("invalidated-now")
    return states


# -- text ----------------------------------------------------------------------------------------
_DTYPE_RE = re.compile(r"\b(?:torch\.)?(bfloat|float|uint|int|complex)(\d+)(\w*)")
_DTYPE_SHORT = {"bfloat": "bf", "float": "f", "uint": "u", "int": "i", "complex": "c"}


_short_cache: dict[str, str] = {}


def _short_dtypes(text: str) -> str:
    """'float32[8, 16]' → 'f32[8, 16]' (bf16, i64, u8, c64, b8 likewise)."""
    short = _short_cache.get(text)
    if short is None:
        short = _DTYPE_RE.sub(lambda m: _DTYPE_SHORT[m.group(1)] + m.group(2) + m.group(3), text)
        short = short.replace("torch.bool", "b8").replace("bool", "b8")
        if len(_short_cache) > 4096:
            _short_cache.clear()
        _short_cache[text] = short
    return short


def _output_text(out: "OutputView") -> str:
    if not out.described:
        return f"{out.index}: shape not recorded"
    shape = ", ".join(str(d) for d in out.shape)
    text = f"{out.index}: {shown(_short_dtypes(out.dtype))}[{shape}]"
    if out.alias_of:
        return f"{text} ↪ alias of {shown(out.alias_of)}"
    return f"{text} {format_bytes(out.nbytes)}"


@dataclass
class _Card:
    """What one node box shows and how it looks; both renderers draw from this."""

    id: int
    title: str
    badges: list[tuple[str, str]]  # (text, colour)
    meta: list[str]
    outputs: list[tuple[str, str, str, str]]  # (mark, mark colour, text, text colour)
    fill: str
    border: str
    width: float  # border width
    dashed: bool
    selected: bool
    text_color: str
    classes: str


#: The badges a node gets from the tree's state, besides the step's own (`_STEP_BADGES`).
INVALIDATED_BADGE = "⊘ invalidated by a new generation"
CURRENT_BADGE = "◆ current node"


def _card(
    snapshot: "Snapshot",
    node: "NodeView",
    step: Optional["Step"],
    selected: Optional[int],
    path: set[int],
    inval_now: set[int],
) -> _Card:
    states = _node_state(snapshot, node, step, path, inval_now)
    is_selected = selected is not None and selected == node.id
    s = STYLE

    badges: list[tuple[str, str]] = []
    if "active" in states:
        _, text, alert = _STEP_BADGES[step.kind]  # type: ignore[union-attr]
        badges.append((text, s["badge_alert"] if alert else s["badge"]))
    if "invalidated-now" in states:
        badges.append((INVALIDATED_BADGE, s["badge_alert"]))
    if "current" in states:
        badges.append((CURRENT_BADGE, s["badge_current"]))

    # fill: what it is; run by this step wins over invalidated, which wins over the kind
    lit = "active" in states and "error" not in states
    stale = "invalidated" in states and not lit
    if lit:
        fill = s["active_fill"]
    elif stale:
        fill = s["invalid_warmup_fill"] if node.kind == "warmup" else s["invalid_graph_fill"]
    elif node.kind == "warmup":
        fill = s["warmup_fill"]
    else:
        fill = s["graph_fill"]
    # border: where the path is; selected wins over current, which wins over on-path
    width = s["border_width"]
    if stale:
        border = s["invalid_border"]
    elif node.kind == "warmup":
        border = s["warmup_border"]
    else:
        border = s["graph_border"]
    if "on-path" in states:
        border, width = s["path_border"], s["path_width"]
    if "current" in states:
        border, width = s["current_border"], s["current_width"]
    if is_selected:
        border, width = s["selected_border"], s["selected_width"]

    text_color = s["invalid_text"] if stale else s["text"]
    replays = f"{node.replays} replay" + ("" if node.replays == 1 else "s")
    meta = [f"node {node.id} · {node.kind}", f"gen {node.generation} · {replays}"]
    if node.signature:
        sig = shown(_short_dtypes(node.signature))
        if len(sig) > MAX_SIGNATURE:
            sig = sig[: MAX_SIGNATURE - 1] + "…"
        meta.append(sig)

    outputs: list[tuple[str, str, str, str]] = []
    outs = node.outputs
    listed = outs if len(outs) <= MAX_OUTPUT_LINES else outs[: MAX_OUTPUT_LINES - 1]
    for out in listed:
        outputs.append((MARKS.get(out.state, "?"), s.get(out.state, s["muted"]), _output_text(out),
                        s["invalid_text"] if out.state == "invalid" else text_color))
    if len(listed) < len(outs):
        rest = outs[len(listed):]
        counts = {k: sum(1 for o in rest if o.state == k) for k in ("live", "dead", "invalid")}
        summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        outputs.append(("…", s["muted"], f"{len(rest)} more: {summary}", s["muted"]))
    if not outs:
        outputs.append(("", s["muted"], "no outputs", s["muted"]))

    classes = ["cgviz-node", f"kind-{node.kind}"]
    classes.extend(f"state-{w}" for w in sorted(states - {node.kind}))
    if is_selected:
        classes.append("state-selected")
    return _Card(node.id, shown(node.function), badges, meta, outputs, fill, border, float(width),
                 stale, is_selected, text_color, " ".join(classes))


def _cards(snapshot: "Snapshot", step: Optional["Step"], selected: Optional[int]) -> list[_Card]:
    path = set(snapshot.path)
    inval_now = _invalidated_now(step)
    return [_card(snapshot, n, step, selected, path, inval_now) for n in snapshot.nodes]


def _edges(snapshot: "Snapshot") -> list[tuple[int, int, str]]:
    """(parent, child, child's function as shown) for every parent → child link, in children order."""
    by_id = {n.id: n for n in snapshot.nodes}
    out = []
    for n in snapshot.nodes:
        for c in n.children:
            child = by_id.get(c)
            if child is not None:
                out.append((n.id, c, shown(child.function)))
    return out


def _on_path_edges(snapshot: "Snapshot") -> set[tuple[int, int]]:
    p = snapshot.path
    return {(p[i], p[i + 1]) for i in range(len(p) - 1)}


# legend entries: (label, fill, border, border width, dashed)
def _legend_items() -> tuple[list[tuple[str, str, str, float, bool]], list[tuple[str, str, str, float, bool]]]:
    s = STYLE
    fills = [
        ("warmup", s["warmup_fill"], s["warmup_border"], 1.2, False),
        ("recorded graph", s["graph_fill"], s["graph_border"], 1.2, False),
        ("this step", s["active_fill"], s["graph_border"], 1.2, False),
        ("invalidated", s["invalid_graph_fill"], s["invalid_border"], 1.2, True),
    ]
    borders = [
        ("on current path", "#ffffff", s["path_border"], float(s["path_width"]), False),
        ("current node", "#ffffff", s["current_border"], float(s["current_width"]), False),
        ("selected", "#ffffff", s["selected_border"], float(s["selected_width"]), False),
    ]
    return fills, borders


# -- DOT -----------------------------------------------------------------------------------------
_ESCAPE_RE = re.compile("[&<>\"'\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def _e(text: str) -> str:
    """Text for HTML-like labels and SVG text: markup characters escaped (& < > " '), and what
    no drawing writes as it is (control characters, line breaks: `shown`) as its escape text;
    the page's placeholders stay (names had theirs escaped by `shown` already). The fast way
    when there is nothing to escape."""
    return html.escape(shown(text, placeholders=False), quote=True) if _ESCAPE_RE.search(text) else text


def _l(text: str) -> str:
    """Text for Graphviz's HTML-like labels: `_e`, and each backslash doubled (Graphviz reads
    `\\N`, `\\G`, `\\E`, ... in a label's text as the node's, graph's or edge's name)."""
    text = _e(text)
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


def _dot_label(card: _Card) -> str:
    # The node's fontsize/fontcolor are the output lines' (_SIZE_OUTPUT, the card's text colour).
    rows = ['<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">']
    for text, color in card.badges:
        rows.append(f"<TR><TD>{_font(text, _SIZE_BADGE, color, bold=True)}</TD></TR>")
    rows.append(f'<TR><TD><FONT POINT-SIZE="{_SIZE_TITLE:g}"><B>{_l(card.title)}</B></FONT></TD></TR>')
    muted = _MUTED if card.text_color == _TEXT else card.text_color
    for line in card.meta:
        rows.append(f"<TR><TD>{_font(line, _SIZE_META, muted)}</TD></TR>")
    for mark, mcolor, text, tcolor in card.outputs:
        body = _l(text) if tcolor == card.text_color else f'<FONT COLOR="{tcolor}">{_l(text)}</FONT>'
        if mark:
            # the gap goes with the mark, as a no-break space: graphviz writes each font run as
            # its own SVG <text>, and SVG would drop a space that starts one
            body = f'<FONT POINT-SIZE="{_SIZE_MARK:g}" COLOR="{mcolor}"><B>{mark}</B>&#160;</FONT>{body}'
        rows.append(f'<TR><TD ALIGN="LEFT">{body}</TD></TR>')
    rows.append("</TABLE>>")
    return _Html("".join(rows))


def _dot_legend() -> str:
    fills, borders = _legend_items()
    s = STYLE

    def cells(items):
        out = []
        for label, fill, border, width, dashed in items:
            style = ' STYLE="dashed"' if dashed else ""
            bw = max(1, round(width))
            out.append(f'<TD BGCOLOR="{fill}" COLOR="{border}" BORDER="{bw}"{style} CELLPADDING="3">'
                       f"{_font(label, _SIZE_LEGEND, _TEXT)}</TD>")
        return "".join(out)

    marks = "".join(
        f"<TD>{_font(MARKS[k], _SIZE_MARK, str(s[k]), bold=True)}</TD><TD>{_font(k, _SIZE_LEGEND, _TEXT)}</TD>"
        for k in ("live", "dead", "invalid")
    )
    row = '<TABLE BORDER="0" CELLSPACING="4" CELLPADDING="0"><TR><TD>{}</TD>{}</TR></TABLE>'
    row1 = row.format(_font("node:", _SIZE_LEGEND, _MUTED), cells(fills))
    row2 = row.format(_font("border:", _SIZE_LEGEND, _MUTED),
                      cells(borders) + f'<TD WIDTH="8"></TD><TD>{_font("outputs:", _SIZE_LEGEND, _MUTED)}</TD>{marks}')
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
            "fontsize": f"{_SIZE_OUTPUT:g}",
            "fontcolor": _TEXT,
            "margin": "0.1,0.06",
        },
        edge_attr={
            "fontname": font,
            "fontsize": f"{_SIZE_EDGE:g}",
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
    for card in _cards(snapshot, step, selected):
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

    on_path = _on_path_edges(snapshot)
    path_edge = {"class": "cgviz-edge on-path", "color": str(s["path_edge"]), "penwidth": f"{s['path_width']:g}"}
    for parent, child, function in _edges(snapshot):
        attrs = {"id": f"edge-{parent}-{child}"}
        attrs.update(path_edge if (parent, child) in on_path else {"class": "cgviz-edge"})
        attrs["label"] = _Html(f"<{_l(function)}>")  # an HTML-like label: the name as text, whatever it holds
        body.append(_stmt(f"n{parent} -> n{child}", attrs))
    return dot.source


# -- SVG via Graphviz ----------------------------------------------------------------------------
_DOT_AVAILABLE: Optional[bool] = None


def dot_available() -> bool:
    """Whether Graphviz's `dot` (and the `graphviz` package) can be used; checked once."""
    global _DOT_AVAILABLE
    if _DOT_AVAILABLE is None:
        _DOT_AVAILABLE = _check_dot()
    return _DOT_AVAILABLE


def _check_dot() -> bool:
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
def _graphviz_svg(dot_source: str) -> str:
    """`dot -Tsvg` of the source; remembered, as stepping back and forth redraws the same trees.
    What comes back holds no link but to `#…` and no script or event handler (`safe_svg`);
    `dot` failing is a `GraphvizError`."""
    import graphviz

    from cgviz.views.svg_output import safe_svg

    try:
        out = graphviz.pipe("dot", "svg", dot_source.encode("utf-8"))
    except (graphviz.CalledProcessError, graphviz.ExecutableNotFound, OSError) as exc:
        raise GraphvizError(_dot_problem(exc)) from None
    svg = out.decode("utf-8", "replace")
    start = svg.find("<svg")
    if start > 0:
        svg = svg[start:]  # drop the XML prolog and DOCTYPE: the SVG embeds in HTML as it is
    # graphviz writes '-' in ids as '&#45;'; write it plainly so "node-3" can be searched as text
    return safe_svg(_ATTR_RE.sub(lambda m: m.group(0).replace("&#45;", "-"), svg))


def tree_svg(
    snapshot: "Snapshot",
    step: Optional["Step"] = None,
    selected: Optional[int] = None,
    renderer: str = "auto",
    *,
    legend: bool = True,
) -> str:
    """The tree as SVG text.

    `renderer`: "graphviz" runs `dot -Tsvg` on `to_dot(...)` (a `GraphvizError` if `dot`
    fails); "builtin" lays the tree out in Python (`builtin_tree_svg`); "auto" uses Graphviz
    when `dot` is installed and the tree has at most AUTO_GRAPHVIZ_MAX_NODES nodes, and
    otherwise (or where `dot` fails) the built-in layout with a one-line notice saying why
    (and how to install Graphviz when it is missing).
    """
    if renderer == "auto":
        if not dot_available():
            return builtin_tree_svg(snapshot, step, selected, legend=legend, notice=GRAPHVIZ_MISSING_NOTICE)
        if len(snapshot.nodes) > AUTO_GRAPHVIZ_MAX_NODES:
            notice = LARGE_TREE_NOTICE.format(nodes=len(snapshot.nodes), limit=AUTO_GRAPHVIZ_MAX_NODES)
            return builtin_tree_svg(snapshot, step, selected, legend=legend, notice=notice)
        try:
            return _graphviz_svg(to_dot(snapshot, step, selected, legend=legend))
        except GraphvizError as exc:
            notice = GRAPHVIZ_FAILED_NOTICE.format(problem=exc.problem)
            return builtin_tree_svg(snapshot, step, selected, legend=legend, notice=notice)
    if renderer == "graphviz":
        if not dot_available():
            raise RuntimeError(GRAPHVIZ_MISSING_NOTICE.replace(": built-in layout", "") +
                               "; or use renderer='builtin'")
        return _graphviz_svg(to_dot(snapshot, step, selected, legend=legend))
    if renderer == "builtin":
        return builtin_tree_svg(snapshot, step, selected, legend=legend)
    raise ValueError(f"unknown renderer {renderer!r}: use 'auto', 'graphviz' or 'builtin'")


# -- built-in layout -----------------------------------------------------------------------------
# Advance widths (in em) of a sans-serif font, on the wide side (DejaVu Sans), so that text
# fits its box whichever sans font the viewer substitutes.
_CHAR_EM: dict[str, float] = {}
for _chars, _w in (
    ("iljI|!.,:;'`", 0.30), (" ", 0.32), ("ftr()[]{}-\"", 0.42), ("sz*/\\", 0.54),
    ("ckvxyJ", 0.60), ("abdeghnopqu_0123456789?$#+<>=~^", 0.64), ("ABCDEFGHKLNOPRSTUVXYZ&", 0.72),
    ("mwMW%@", 0.96), ("Q", 0.79),
):
    for _c in _chars:
        _CHAR_EM[_c] = _w
_WIDE_EM = 0.86  # marks and arrows: ● ○ ✕ ↪ ▶ ◆ ↺ ⚠
_OTHER_EM = 0.66

_width_cache: dict[tuple[str, float, bool], float] = {}


def _text_width(text: str, size: float, bold: bool = False) -> float:
    key = (text, size, bold)
    w = _width_cache.get(key)
    if w is None:
        get = _CHAR_EM.get
        em = sum(get(c, _WIDE_EM if ord(c) > 0x2000 else _OTHER_EM) for c in text)
        w = em * size * (1.08 if bold else 1.0)
        if len(_width_cache) > 20000:
            _width_cache.clear()
        _width_cache[key] = w
    return w


_PAD_X = 10.0
_PAD_Y = 7.0
_LINE_BADGE = 13.0
_LINE_TITLE = 18.0
_LINE_META = 12.5
_LINE_OUTPUT = 14.0
_MIN_WIDTH = 96.0
_SIBLING_GAP = 22.0
_LEVEL_GAP = 54.0  # between rows: the elbow and the edge label
_MARGIN = 14.0


def _card_size(card: _Card) -> tuple[float, float]:
    w = _text_width(card.title, _SIZE_TITLE, True)
    for text, _ in card.badges:
        w = max(w, _text_width(text, _SIZE_BADGE, True))
    for line in card.meta:
        w = max(w, _text_width(line, _SIZE_META))
    for mark, _, text, _ in card.outputs:
        w = max(w, _text_width(mark, _SIZE_MARK, True) + _text_width(" " + text, _SIZE_OUTPUT))
    width = max(_MIN_WIDTH, w + 2 * _PAD_X)
    height = (2 * _PAD_Y + _LINE_BADGE * len(card.badges) + _LINE_TITLE + _LINE_META * len(card.meta)
              + 3 + _LINE_OUTPUT * len(card.outputs))
    return width, height


class _Contour:
    """Left and right edges of a laid-out subtree, one per depth, deepest first.

    The real value at depth d (0: the subtree's root) is `lefts[len-1-d] + dl` (and likewise
    for rights), so shifting a whole subtree is O(1). A contour is never changed once made:
    merging makes a new one (sharing the lists it can), so a `LayoutCache` can hand the same
    one to every tree that holds its subtree.
    """

    __slots__ = ("lefts", "rights", "dl", "dr")

    def __init__(self, lefts: list[float], rights: list[float], dl: float = 0.0, dr: float = 0.0) -> None:
        self.lefts = lefts
        self.rights = rights
        self.dl = dl
        self.dr = dr


def _merge(row: _Contour, c: _Contour, gap: float) -> tuple[float, _Contour]:
    """Place subtree `c` right of the subtrees merged in `row`, as close as their contours
    allow: its root's offset from the row's first root, and the row's contour with it."""
    lefts, rights, dl, dr = row.lefts, row.rights, row.dl, row.dr
    na, nc = len(lefts), len(c.lefts)
    cl = c.lefts
    sep = max(rights[na - 1 - d] + dr - (cl[nc - 1 - d] + c.dl) for d in range(min(na, nc))) + gap
    cdl, cdr = c.dl + sep, c.dr + sep
    if nc > na:  # lefts: the row's where it reaches, c's below
        shift = dl - cdl
        lefts, dl = cl[: nc - na] + [v + shift for v in lefts], cdl
    if nc >= na:  # rights: c's where it reaches, the row's below
        rights, dr = c.rights, cdr
    else:
        shift = cdr - dr
        rights = rights[: na - nc] + [v + shift for v in c.rights]
    return sep, _Contour(lefts, rights, dl, dr)


def _place_row(contours: list[_Contour], gap: float) -> tuple[list[float], Optional[_Contour]]:
    """Place subtrees left to right, each as close as its contours allow; offsets of their roots
    (the first at 0) and the merged contour (`contours` are left as they are)."""
    if not contours:
        return [], None
    acc = contours[0]
    offsets = [0.0]
    for c in contours[1:]:
        sep, acc = _merge(acc, c, gap)
        offsets.append(sep)
    return offsets, acc


def _pack(half: float, contours: list[_Contour]) -> tuple[_Contour, tuple[float, ...]]:
    """A node of half width `half` over its children's subtrees (`contours`, left to right):
    its subtree's contour, and each child's x relative to the node (centred under it)."""
    if not contours:
        return _Contour([-half], [half]), ()
    if len(contours) == 1:  # right under the node: the general case, with offset and middle 0, sooner
        c = contours[0]
        return _Contour([*c.lefts, -half - c.dl], [*c.rights, half - c.dr], c.dl, c.dr), (0.0,)
    offsets, acc = _place_row(contours, _SIBLING_GAP)
    assert acc is not None
    mid = (offsets[0] + offsets[-1]) / 2
    dl, dr = acc.dl - mid, acc.dr - mid
    return _Contour([*acc.lefts, -half - dl], [*acc.rights, half - dr], dl, dr), tuple(map(sub, offsets, repeat(mid)))


class _Subtree:
    """A node's subtree packed on its own (`_pack`), from the node's shape (`_Shape`): its
    contour, and each child's x relative to the node. Hashed by identity: a shape holds its
    children's subtrees, the same objects wherever they did not change."""

    __slots__ = ("contour", "offsets")

    def __init__(self, shape: "_Shape") -> None:
        _, width, _, kids = shape
        self.contour, self.offsets = _pack(width / 2, [k.contour for k in kids])


# a node's shape: its id, its box's width and height, and its children's subtrees
_Shape = tuple[int, float, float, tuple[_Subtree, ...]]


class _Level:
    """One level (depth) of a tree being laid out: its nodes, their boxes' sizes, where each
    one's children end in the level below, and the nodes' shapes and subtrees."""

    __slots__ = ("nodes", "widths", "heights", "ends", "shapes", "subtrees")

    def __init__(self, nodes: list[int], sizes: Mapping[int, Sequence[float]], kids: dict[int, list[int]]) -> None:
        self.nodes = nodes
        box_sizes = list(map(sizes.__getitem__, nodes))
        self.widths = list(map(itemgetter(0), box_sizes))
        self.heights = list(map(itemgetter(1), box_sizes))
        self.ends = list(accumulate(map(len, map(kids.__getitem__, nodes))))
        self.shapes: list[_Shape] = []
        self.subtrees: tuple[_Subtree, ...] = ()

    def pack(self, below: tuple[_Subtree, ...], before: Optional["_Level"]) -> None:
        """Each node's subtree over the level below's: `before`'s (this depth in the last tree)
        where the node's shape is the same there, else packed anew."""
        runs = map(below.__getitem__, map(slice, chain((0,), self.ends), self.ends))
        self.shapes = list(zip(self.nodes, self.widths, self.heights, runs))
        known = dict(zip(before.shapes, before.subtrees)) if before is not None else {}
        self.subtrees = tuple([known.get(shape) or _Subtree(shape) for shape in self.shapes])

    def repack(self, before: "_Level", below: tuple[_Subtree, ...], below_before: tuple[_Subtree, ...]) -> bool:
        """`before`'s subtrees (this depth in the last tree, over `below_before`), but packed
        anew for the nodes whose children's subtrees differ in `below`; False, doing nothing,
        unless this level has the same nodes, sizes and children counts as `before`: then
        only those nodes are looked at (found by C loops)."""
        if (self.nodes != before.nodes or self.ends != before.ends or self.widths != before.widths
                or self.heights != before.heights):
            return False
        shapes, subtrees = list(before.shapes), list(before.subtrees)
        starts = [0, *self.ends]
        for j in {bisect_right(self.ends, i) for i in compress(count(), map(is_not, below, below_before))}:
            shapes[j] = shape = (self.nodes[j], self.widths[j], self.heights[j], below[starts[j] : self.ends[j]])
            subtrees[j] = _Subtree(shape)
        self.shapes, self.subtrees = shapes, tuple(subtrees)
        return True


class _Placed:
    """A root's subtree placed with the root at x: its nodes (level by level, as counted), with
    their depths, x centres, widths, half widths and heights; how far left and right its boxes
    reach; and each of its rows' tallest box."""

    __slots__ = ("nodes", "counts", "depths", "xs", "widths", "halves", "heights", "left", "right", "row_heights",
                 "_boxes")

    def __init__(self, levels: list[list[int]], subtrees: list[tuple[_Subtree, ...]], x: float,
                 sizes: Mapping[int, Sequence[float]]) -> None:
        xs = [[x]]
        for above in subtrees[:-1]:  # a level's children, in order, are the next level
            xs.append([px + off for px, s in zip(xs[-1], above) for off in s.offsets])
        self.counts = list(map(len, levels))
        self.nodes = list(chain.from_iterable(levels))
        self.depths = list(chain.from_iterable(map(repeat, range(len(levels)), self.counts)))
        self.xs = list(chain.from_iterable(xs))
        box_sizes = list(map(sizes.__getitem__, self.nodes))
        self.widths = [s[0] for s in box_sizes]
        self.halves = [w / 2 for w in self.widths]
        self.heights = [s[1] for s in box_sizes]
        self.left = min(map(sub, self.xs, self.halves))
        self.right = max(map(add, self.xs, self.halves))
        ends = list(accumulate(self.counts))
        self.row_heights = [max([0.0, *self.heights[start:end]]) for start, end in zip([0, *ends], ends)]
        self._boxes: Optional[tuple[float, tuple[float, ...], dict[int, tuple[float, float, float, float]]]] = None

    def boxes(self, shift: float, tops: list[float]) -> dict[int, tuple[float, float, float, float]]:
        """Its boxes (x, y, w, h): x shifted by `shift`, each row at its top in `tops`. The
        last ones made are kept: the next tree mostly has the same shift and rows."""
        key = tuple(tops[: len(self.counts)])
        if self._boxes is None or self._boxes[:2] != (shift, key):
            box = {v: (x + shift - half, key[d], w, h)
                   for v, d, x, half, w, h in zip(self.nodes, self.depths, self.xs, self.halves, self.widths,
                                                   self.heights)}
            self._boxes = (shift, key, box)
        return self._boxes[2]


class LayoutCache:
    """What laying out a tree worked out, for laying out the next, which mostly shares it (as
    the trees of a tree growing node by node do): its levels, with their nodes' subtrees
    packed (`_Level`), its row of roots, and its roots' subtrees placed (`_Placed`). Only the
    last tree's are kept."""

    __slots__ = ("levels", "row", "placed")

    def __init__(self) -> None:
        self.levels: list[_Level] = []
        self.row: list[tuple[_Subtree, float, _Contour]] = []  # per root: its subtree, its x, the row's contour to it
        self.placed: dict[tuple[_Subtree, float], _Placed] = {}


def _forest(ids: set[int], snapshot: "Snapshot") -> tuple[list[list[int]], dict[int, list[int]]]:
    """The nodes `ids` of `snapshot` level by level from the roots (the children of a level's
    nodes, in order, make the next level), and each node's children as placed: a node
    reachable twice (not a tree) is placed once, under its first parent in pre-order; a node
    no root reaches (a cycle) is a root too."""
    nodes = snapshot.nodes
    children = {n.id: n.children for n in nodes}
    if not ids.issuperset(chain.from_iterable(children.values())):
        children = {v: [c for c in cs if c in ids] for v, cs in children.items()}
    roots = [n.id for n in nodes if n.parent is None or n.parent not in ids]
    listed = list(chain.from_iterable(children.values()))
    if len(set(chain(roots, listed))) == len(roots) + len(listed):  # no node twice among roots and children
        levels = _levels(roots, children)
        if sum(map(len, levels)) == len(children):  # every node reached: a plain forest
            return levels, children
    top, kids = _forest_walk(roots, children, nodes)
    return _levels(top, kids), kids


def _levels(top: list[int], kids: dict[int, list[int]]) -> list[list[int]]:
    """The nodes under `top`, level by level; `kids` must be a forest under `top` (no node
    listed twice, no node of `top` listed), or this would not end."""
    levels = []
    level = top
    while level:
        levels.append(level)
        level = [c for v in level for c in kids[v]]
    return levels


def _forest_walk(roots: list[int], children: dict[int, list[int]],
                 nodes: list["NodeView"]) -> tuple[list[int], dict[int, list[int]]]:
    """`_forest` of any snapshot, a malformed one included, by a pre-order walk from each
    root: the roots that are no other node's child, and each node's children as placed."""
    depth: dict[int, int] = {}
    order: list[int] = []  # pre-order

    def visit(root: int) -> None:
        stack = [(root, 0)]
        while stack:
            v, d = stack.pop()
            if v in depth:
                continue
            depth[v] = d
            order.append(v)
            stack.extend((c, d + 1) for c in reversed(children[v]) if c not in depth)

    for r in roots:
        visit(r)
    for n in nodes:  # only in a malformed snapshot (a cycle): shown as a root
        if n.id not in depth:
            roots.append(n.id)
            visit(n.id)
    kids = {v: [c for c in children[v] if depth.get(c) == depth[v] + 1] for v in order}
    seen_child: set[int] = set()
    for v in order:
        uniq = []
        for c in kids[v]:
            if c not in seen_child:
                seen_child.add(c)
                uniq.append(c)
        kids[v] = uniq
    return [r for r in roots if depth[r] == 0], kids


def _placed(ids: set[int], sizes: Mapping[int, Sequence[float]], snapshot: "Snapshot",
            cache: Optional[LayoutCache]) -> list[_Placed]:
    """Each root's subtree placed, the roots side by side (see `_tidy_layout`)."""
    levels, kids = _forest(ids, snapshot)
    if not levels:
        return []
    if cache is None:
        cache = LayoutCache()
    subtrees = _subtrees(levels, kids, sizes, cache)
    known, used = cache.placed, {}
    out: list[_Placed] = []
    starts = [0] * len(levels)  # where the next root's nodes begin in each level
    for root, x in zip(subtrees[0], _root_offsets(subtrees[0], cache)):
        placed = known.get((root, x))
        if placed is None:
            placed = _Placed(*_subtree_levels(levels, subtrees, kids, starts), x, sizes)
        used[(root, x)] = placed
        out.append(placed)
        starts[: len(placed.counts)] = map(add, starts, placed.counts)
    cache.placed = used
    return out


def _subtrees(levels: list[list[int]], kids: dict[int, list[int]], sizes: Mapping[int, Sequence[float]],
              cache: LayoutCache) -> list[tuple[_Subtree, ...]]:
    """Per level, each node's subtree packed (`_Subtree`), a level at a time, deepest first,
    from the last tree laid out (`cache`): where a level has the same nodes, sizes and children
    counts as there, only the nodes whose children's subtrees changed are packed again, and
    elsewhere a node of the same shape as there takes the same subtree."""
    last = cache.levels
    now: list[_Level] = []
    below: tuple[_Subtree, ...] = ()
    for d in range(len(levels) - 1, -1, -1):
        level = _Level(levels[d], sizes, kids)
        before = last[d] if d < len(last) else None
        below_before = last[d + 1].subtrees if d + 1 < len(last) else ()
        if before is None or not level.repack(before, below, below_before):
            level.pack(below, before)
        now.append(level)
        below = level.subtrees
    now.reverse()
    cache.levels = now
    return [level.subtrees for level in now]


def _root_offsets(roots: tuple[_Subtree, ...], cache: LayoutCache) -> list[float]:
    """The roots' x, side by side (`_place_row`, with a wider gap), merged again only from the
    first root that is not the last tree's."""
    row = cache.row
    same = next(compress(count(), map(is_not, roots, [r for r, _, _ in row])), min(len(roots), len(row)))
    row = row[:same] or [(roots[0], 0.0, roots[0].contour)]
    for root in roots[len(row):]:
        x, merged = _merge(row[-1][2], root.contour, _SIBLING_GAP * 1.6)
        row.append((root, x, merged))
    cache.row = row
    return [x for _, x, _ in row]


def _subtree_levels(levels: list[list[int]], subtrees: list[tuple[_Subtree, ...]], kids: dict[int, list[int]],
                    starts: list[int]) -> tuple[list[list[int]], list[tuple[_Subtree, ...]]]:
    """The nodes and subtrees, level by level, of the root at `starts` (each level's share of a
    root's subtree is a run: the children of the level above's share)."""
    nodes: list[list[int]] = []
    subs: list[tuple[_Subtree, ...]] = []
    n = 1  # the root's share of the level
    for start, level, level_subs in zip(starts, levels, subtrees):
        if not n:
            break
        nodes.append(level[start : start + n])
        subs.append(level_subs[start : start + n])
        n = sum(map(len, map(kids.__getitem__, nodes[-1])))
    return nodes, subs


def _tidy_layout(
    ids: set[int], sizes: Mapping[int, Sequence[float]], snapshot: "Snapshot", cache: Optional[LayoutCache] = None
) -> tuple[dict[int, float], dict[int, int]]:
    """x centre and depth of every node: children centred under their parent, subtrees packed
    side by side without overlap (Reingold–Tilford), roots side by side. `cache` keeps what
    was worked out for the next call: a tree that changed in one place is packed again only
    along that node's path to its root, and only its root's subtree is placed again."""
    x: dict[int, float] = {}
    depth: dict[int, int] = {}
    for placed in _placed(ids, sizes, snapshot, cache):
        x.update(zip(placed.nodes, placed.xs))
        depth.update(zip(placed.nodes, placed.depths))
    return x, depth


_PLAIN_EDGE = (f' stroke="{STYLE["edge"]}" fill="{STYLE["edge"]}" stroke-width="1.3" '
               f'font-size="{_SIZE_EDGE:g}" text-anchor="middle"')
_PATH_EDGE = (f' stroke="{STYLE["path_edge"]}" fill="{STYLE["path_edge"]}" stroke-width="{STYLE["path_width"]:g}" '
              f'font-size="{_SIZE_EDGE:g}" text-anchor="middle" stroke-linejoin="round"')


def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _svg_text(x: float, y: float, size: float, color: str, body: str, anchor: str = "middle",
              bold: bool = False) -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (f'<text x="{_f(x)}" y="{_f(y)}" font-size="{size:g}" fill="{color}" '
            f'text-anchor="{anchor}"{weight}>{body}</text>')


def _svg_legend(x0: float, y0: float) -> tuple[list[str], float, float]:
    """The legend's SVG elements at (x0, y0) and its width and height."""
    fills, borders = _legend_items()
    s = STYLE
    parts = ['<g id="legend" class="cgviz-legend">']
    size = _SIZE_LEGEND
    row_h = 22.0
    width = 0.0
    for r, (head, items) in enumerate((("node:", fills), ("border:", borders))):
        y = y0 + r * row_h
        x = x0
        parts.append(_svg_text(x, y + 14, size, str(s["muted"]), _e(head), anchor="start"))
        x += 46
        for label, fill, border, bw, dashed in items:
            tw = _text_width(label, size) + 12
            dash = ' stroke-dasharray="4 2"' if dashed else ""
            parts.append(f'<rect x="{_f(x)}" y="{_f(y + 2)}" width="{_f(tw)}" height="17" rx="3" fill="{fill}" '
                         f'stroke="{border}" stroke-width="{bw:g}"{dash}/>')
            parts.append(_svg_text(x + tw / 2, y + 14.5, size, str(s["text"]), _e(label)))
            x += tw + 6
        if r == 1:
            x += 8
            parts.append(_svg_text(x, y + 14, size, str(s["muted"]), "outputs:", anchor="start"))
            x += _text_width("outputs:", size) + 6
            for k in ("live", "dead", "invalid"):
                parts.append(_svg_text(x, y + 14.5, _SIZE_MARK, str(s[k]), MARKS[k], anchor="start", bold=True))
                x += _text_width(MARKS[k], _SIZE_MARK, True) + 3
                parts.append(_svg_text(x, y + 14, size, str(s["text"]), k, anchor="start"))
                x += _text_width(k, size) + 10
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
    y = _MARGIN
    width = 0.0
    if notice:
        head.append(f'<text class="cgviz-notice" x="{_f(_MARGIN)}" y="{_f(y + 10)}" font-size="10" '
                    f'fill="{s["muted"]}" font-style="italic">{_e(notice)}</text>')
        width = max(width, _text_width(notice, 10) + 2 * _MARGIN)
        y += 20
    if not snapshot.nodes:
        w = _text_width(EMPTY_TEXT, 12) + 28
        body = [
            f'<g id="empty" class="cgviz-empty">'
            f'<rect x="{_f(_MARGIN)}" y="{_f(y)}" width="{_f(w)}" height="34" rx="4" fill="{s["note_fill"]}" '
            f'stroke="{s["muted"]}" stroke-width="1"/>'
            + _svg_text(_MARGIN + w / 2, y + 21, 12, str(s["muted"]), _e(EMPTY_TEXT)) + "</g>"
        ]
        width = max(width, w + 2 * _MARGIN)
        return _svg_doc(width, y + 34 + _MARGIN, head + body)
    if legend:
        parts, lw, lh = _svg_legend(_MARGIN, y)
        head.extend(parts)
        width = max(width, lw + 2 * _MARGIN)
        y += lh + 16

    cards = _cards(snapshot, step, selected)
    sizes = {c.id: _card_size(c) for c in cards}
    box, depth, right, height = _boxes([c.id for c in cards], sizes, snapshot, y)
    width = max(width, right + _MARGIN)
    by_id = {c.id: c for c in cards}

    # edges: elbows from the parent's bottom to the child's top, the label over the child's drop
    on_path = _on_path_edges(snapshot)
    edges_plain: list[str] = []
    edges_path: list[str] = []
    for parent, child, function in _edges(snapshot):
        if parent not in box or child not in box or depth[child] != depth[parent] + 1:
            continue
        hot = (parent, child) in on_path
        inner = _edge_inner(box[parent], box[child], function, hot, by_id[child].selected)
        (edges_path if hot else edges_plain).append(
            f'<g id="edge-{parent}-{child}" class="cgviz-edge{" on-path" if hot else ""}" '
            f'data-parent="{parent}" data-child="{child}"{_PATH_EDGE if hot else _PLAIN_EDGE}>{inner}</g>'
        )

    # nodes: a group per node, moved into place; text inherits size, colour and anchor from it
    nodes: list[str] = []
    for c in cards:
        x0, y0, w, h = box[c.id]
        ring = (f'<rect x="-4" y="-4" width="{w + 8:.1f}" height="{h + 8:.1f}" rx="8" fill="none" '
                f'stroke="{c.border}" stroke-width="{c.width:g}"/>' if c.selected else "")
        nodes.append(
            f'<g id="node-{c.id}" class="{c.classes}" data-node="{c.id}" transform="translate({x0:.1f},{y0:.1f})" '
            f'font-size="{_SIZE_META:g}" fill="{_card_muted(c)}" text-anchor="middle">'
            f"<title>{_e(c.title)} (node {c.id})</title>{ring}{_node_inner(c, f'{w:.1f}', f'{w / 2:.1f}', h)}</g>"
        )

    return _svg_doc(width, height, head + ['<g class="cgviz-edges">'] + edges_plain + edges_path + ["</g>"] + nodes)


def _boxes(
    ids: list[int], sizes: Mapping[int, Sequence[float]], snapshot: "Snapshot", top: float,
    cache: Optional[LayoutCache] = None,
) -> tuple[dict[int, tuple[float, float, float, float]], dict[int, int], float, float]:
    """Every node's box (x, y, w, h) below `top`, its depth, and the right and bottom edges of
    the drawing: rows one per depth, each as tall as its tallest box, boxes top-aligned.
    `ids` are the snapshot's nodes, `sizes` their boxes' (w, h, ...); `cache`: see `_tidy_layout`."""
    placed = _placed(set(ids), sizes, snapshot, cache)
    rows = [max([0.0, *row]) for row in zip_longest(*[p.row_heights for p in placed], fillvalue=0.0)]
    tops = list(accumulate([h + _LEVEL_GAP for h in rows], initial=top))
    shift = _MARGIN - min(p.left for p in placed)
    right = max(p.right for p in placed) + shift
    box: dict[int, tuple[float, float, float, float]] = {}
    depth: dict[int, int] = {}
    for p in placed:
        box.update(p.boxes(shift, tops))
        depth.update(zip(p.nodes, p.depths))
    return box, depth, right, tops[-1] - _LEVEL_GAP + _MARGIN


def _card_muted(card: _Card) -> str:
    """The colour of a box's secondary text (its group's fill): muted, or the stale grey."""
    return _MUTED if card.text_color == _TEXT else card.text_color


def _node_inner(c: _Card, w: str, cx: str, h: float) -> str:
    """A node box's rectangle and texts, relative to its group; `w` and `cx` (its width and
    centre) come formatted, so a page can draw the same box at a width it chooses later."""
    dash = ' stroke-dasharray="5 3"' if c.dashed else ""
    parts = [f'<rect width="{w}" height="{h:.1f}" rx="6" fill="{c.fill}" stroke="{c.border}" '
             f'stroke-width="{c.width:g}"{dash}/>']
    ty = _PAD_Y
    for text, color in c.badges:
        parts.append(f'<text x="{cx}" y="{ty + 10:.1f}" font-size="{_SIZE_BADGE:g}" font-weight="bold" '
                     f'fill="{color}">{_e(text)}</text>')
        ty += _LINE_BADGE
    parts.append(f'<text x="{cx}" y="{ty + 14:.1f}" font-size="{_SIZE_TITLE:g}" font-weight="bold" '
                 f'fill="{c.text_color}">{_e(c.title)}</text>')
    ty += _LINE_TITLE
    for line in c.meta:
        parts.append(f'<text x="{cx}" y="{ty + 9.5:.1f}">{_e(line)}</text>')
        ty += _LINE_META
    ty += 3
    for mark, mcolor, text, tcolor in c.outputs:
        mark_span = (f'<tspan fill="{mcolor}" font-weight="bold" font-size="{_SIZE_MARK:g}">{mark}</tspan> '
                     if mark else "")
        parts.append(f'<text x="{_PAD_X:g}" y="{ty + 10.5:.1f}" text-anchor="start" font-size="{_SIZE_OUTPUT:g}" '
                     f'fill="{tcolor}">{mark_span}{_e(text)}</text>')
        ty += _LINE_OUTPUT
    return "".join(parts)


def _edge_inner(pbox: tuple[float, float, float, float], cbox: tuple[float, float, float, float],
                function: str, hot: bool, selected: bool = False) -> str:
    """An edge's elbow, arrowhead and label from a parent's box to a child's (x, y, w, h); the
    label is `function` as `shown` writes it (one line, whatever the name holds)."""
    function = shown(function)
    px, py, pw, ph = pbox
    cx, cy, cw, _ = cbox
    x1, y1 = px + pw / 2, py + ph
    x2, y2 = cx + cw / 2, cy - (4 if selected else 0)  # to the outer ring if selected
    ye = cy - _LEVEL_GAP + 15
    ah, al = (5.5, 10.0) if hot else (4.0, 7.0)  # arrowhead half-width and length
    if abs(x1 - x2) < 0.5:
        d = f"M{x1:.1f},{y1:.1f}V{y2 - al + 1:.1f}"
    else:
        r = min(6.0, abs(x2 - x1) / 2)
        sx = r if x2 > x1 else -r
        d = (f"M{x1:.1f},{y1:.1f}V{ye - r:.1f}Q{x1:.1f},{ye:.1f} {x1 + sx:.1f},{ye:.1f}"
             f"H{x2 - sx:.1f}Q{x2:.1f},{ye:.1f} {x2:.1f},{ye + r:.1f}V{y2 - al + 1:.1f}")
    lw = _text_width(function, _SIZE_EDGE) + 8
    ly = cy - 18
    return (f'<path d="{d}" fill="none"/>'
            f'<path d="M{x2 - ah:.1f},{y2 - al:.1f}L{x2:.1f},{y2:.1f}L{x2 + ah:.1f},{y2 - al:.1f}Z" stroke="none"/>'
            f'<rect x="{x2 - lw / 2:.1f}" y="{ly - 7:.1f}" width="{lw:.1f}" height="13" rx="2" '
            f'fill="{STYLE["background"]}" stroke="none"/>'
            f'<text x="{x2:.1f}" y="{ly + 3.5:.1f}" stroke="none" fill="{STYLE["edge_label"]}">{_e(function)}</text>')


def _svg_doc(width: float, height: float, body: Iterable[str]) -> str:
    return "\n".join(_svg_lines(width, height, list(body)))


def _svg_lines(width: float, height: float, body: list[str]) -> list[str]:
    """`_svg_doc`'s lines, for a caller that stores drawings as lines (no join to split again)."""
    s = STYLE
    w, h = _f(width), _f(height)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f'font-family="{s["font"]}" class="cgviz-tree" id="cgviz-tree">'
            f'<rect class="cgviz-background" x="0" y="0" width="{w}" height="{h}" fill="{s["background"]}"/>')
    if len(body) < 2:
        return [head + "".join(body) + "</svg>"]
    return [head + body[0], *body[1:-1], body[-1] + "</svg>"]
