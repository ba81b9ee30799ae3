"""What a tree node's box shows and how it looks (`Card`), and how large it is.

Both renderers (DOT for Graphviz, the built-in SVG) and the page's tree frames draw a box from
its card, so a node says the same words in the same colours whichever draws it. The box's size
comes from font metrics worked out here, as the built-in layout cannot ask a browser.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from cgviz.views.style import TREE_STYLE
from cgviz.views.sums import added_in_turn
from cgviz.views.text import format_bytes, plural, shown

if TYPE_CHECKING:
    from cgviz.trace.model import NodeView, OutputView, Snapshot, Step

#: Colours and widths shared by the DOT and the built-in renderer (the palette's tree part).
STYLE = TREE_STYLE

#: The mark of an output in each state.
MARKS: dict[str, str] = {"live": "●", "dead": "○", "invalid": "✕"}

EMPTY_TEXT = "no functions have run yet"

# at most this many output lines in a box; the rest are summed up in one line
MAX_OUTPUT_LINES = 8
# signatures longer than this are cut with "…"
MAX_SIGNATURE = 44

# font sizes, shared by both renderers (points in DOT, pixels in the built-in SVG)
SIZE_BADGE = 9.5
SIZE_TITLE = 13.0
SIZE_META = 9.5
SIZE_OUTPUT = 10.0
SIZE_MARK = 11.5
SIZE_EDGE = 9.5
SIZE_LEGEND = 10.0

#: What a step did to the node it names: (state, badge text, alert?).
STEP_BADGES: dict[str, tuple[str, str, bool]] = {
    "warmup": ("warming", "▶ warming up now", False),
    "record": ("recording", "★ just recorded", False),
    "execute": ("replaying", "▶ replaying now", False),
    "checkpoint_restore": ("restored", "↺ allocator restored here", False),
    "eager": ("eager", "eager run here", False),
    "error": ("error", "⚠ error here", True),
}

#: The badges a node gets from the tree's state, besides the step's own (`STEP_BADGES`).
INVALIDATED_BADGE = "⊘ invalidated by a new generation"
CURRENT_BADGE = "◆ current node"

_TEXT = str(STYLE["text"])
_MUTED = str(STYLE["muted"])


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
    return _node_state(snapshot, node, step, set(snapshot.path), invalidated_now(step))


def invalidated_now(step: Optional["Step"]) -> set[int]:
    """The nodes whose outputs `step` invalidated (a generation step's), as their badge says."""
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
    if step is not None and step.node == node.id and step.kind in STEP_BADGES:
        states.add("active")
        states.add(STEP_BADGES[step.kind][0])
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


_ESCAPE_RE = re.compile("[&<>\"'\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def escape(text: str) -> str:
    """Text for HTML-like labels and SVG text: markup characters escaped (& < > " '), and what
    no drawing writes as it is (control characters, line breaks: `shown`) as its escape text;
    the page's placeholders stay (names had theirs escaped by `shown` already). The fast way
    when there is nothing to escape."""
    return html.escape(shown(text, placeholders=False), quote=True) if _ESCAPE_RE.search(text) else text


# -- the card ------------------------------------------------------------------------------------
@dataclass
class Card:
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

    @property
    def muted(self) -> str:
        """The colour of the box's secondary text: muted, or the stale grey."""
        return _MUTED if self.text_color == _TEXT else self.text_color


def card(
    snapshot: "Snapshot",
    node: "NodeView",
    step: Optional["Step"],
    selected: Optional[int],
    path: set[int],
    inval_now: set[int],
) -> Card:
    """`node`'s box after `step`: `path` is the snapshot's path as a set and `inval_now`
    `invalidated_now(step)`, worked out once by a caller that makes many cards."""
    states = _node_state(snapshot, node, step, path, inval_now)
    is_selected = selected is not None and selected == node.id
    s = STYLE

    badges: list[tuple[str, str]] = []
    if "active" in states:
        _, text, alert = STEP_BADGES[step.kind]  # type: ignore[union-attr]
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
    meta = [f"node {node.id} · {node.kind}", f"gen {node.generation} · {plural(node.replays, 'replay')}"]
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
    return Card(node.id, shown(node.function), badges, meta, outputs, fill, border, float(width),
                stale, is_selected, text_color, " ".join(classes))


def cards(snapshot: "Snapshot", step: Optional["Step"], selected: Optional[int]) -> list[Card]:
    """Every node's card, in the snapshot's order."""
    path = set(snapshot.path)
    inval_now = invalidated_now(step)
    return [card(snapshot, n, step, selected, path, inval_now) for n in snapshot.nodes]


def edges(snapshot: "Snapshot") -> list[tuple[int, int, str]]:
    """(parent, child, child's function as shown) for every parent → child link, in children order."""
    by_id = {n.id: n for n in snapshot.nodes}
    out = []
    for n in snapshot.nodes:
        for c in n.children:
            child = by_id.get(c)
            if child is not None:
                out.append((n.id, c, shown(child.function)))
    return out


def on_path_edges(snapshot: "Snapshot") -> set[tuple[int, int]]:
    """The (parent, child) links along the current path."""
    p = snapshot.path
    return {(p[i], p[i + 1]) for i in range(len(p) - 1)}


#: A legend entry: (label, fill, border, border width, dashed).
LegendItem = tuple[str, str, str, float, bool]


def legend_items() -> tuple[list[LegendItem], list[LegendItem]]:
    """The legend's entries, for both renderers: what a fill says, and what a border says."""
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


# -- sizes ---------------------------------------------------------------------------------------
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


def text_width(text: str, size: float, bold: bool = False) -> float:
    """How wide `text` is drawn at font size `size`, in the size's unit (a little wide)."""
    key = (text, size, bold)
    w = _width_cache.get(key)
    if w is None:
        get = _CHAR_EM.get
        em = added_in_turn(get(c, _WIDE_EM if ord(c) > 0x2000 else _OTHER_EM) for c in text)
        w = em * size * (1.08 if bold else 1.0)
        if len(_width_cache) > 20000:
            _width_cache.clear()
        _width_cache[key] = w
    return w


# a box's padding and the height of each of its lines
PAD_X = 10.0
PAD_Y = 7.0
LINE_BADGE = 13.0
LINE_TITLE = 18.0
LINE_META = 12.5
LINE_OUTPUT = 14.0
_MIN_WIDTH = 96.0


def card_size(c: Card) -> tuple[float, float]:
    """The box's width and height in the built-in layout."""
    w = text_width(c.title, SIZE_TITLE, True)
    for text, _ in c.badges:
        w = max(w, text_width(text, SIZE_BADGE, True))
    for line in c.meta:
        w = max(w, text_width(line, SIZE_META))
    for mark, _, text, _ in c.outputs:
        w = max(w, text_width(mark, SIZE_MARK, True) + text_width(" " + text, SIZE_OUTPUT))
    width = max(_MIN_WIDTH, w + 2 * PAD_X)
    height = (2 * PAD_Y + LINE_BADGE * len(c.badges) + LINE_TITLE + LINE_META * len(c.meta)
              + 3 + LINE_OUTPUT * len(c.outputs))
    return width, height


def widest_badge() -> float:
    """The width of the widest badge any node may get while steps run, for a box drawn with
    room for whatever badge a later step gives it."""
    texts = [badge[1] for badge in STEP_BADGES.values()] + [CURRENT_BADGE, INVALIDATED_BADGE]
    return max(text_width(text, SIZE_BADGE, True) for text in texts)
