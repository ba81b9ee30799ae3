"""The one palette of every view and host: one colour per node, one per step kind, the tree's
fills and borders, the pool's fixed fills, and the CSS variables the explorer's page uses.

    node_color(2)          # '#2ca02c': the same node has the same colour in every view
    STEP_COLORS["record"]  # '#0072b2'
    block_style(block)     # (category, face colour, hatch) of a pool block

Node colours come from a qualitative palette (matplotlib's tab20 without its greys, topped
up with tab20b's indigo pair: ten strong hues first, then their light variants), cycled
by node id, so they do not depend on which other nodes exist or the order they are drawn
in. Greys are kept for the pool's free space and unowned blocks, so a grey block never
reads as a node.

Step-kind colours are the Okabe–Ito colour-blind-safe palette (warmup orange, record
blue, execute green, error vermilion, …) plus black for a new generation and a neutral
grey for path ends, the quietest event; the steps of CUDA graphs made outside the trees
(capture, replay, destroy) get violet, leaf green and brown grey.

`css_variables()` writes the colours the explorer's front end shares with the pictures as
CSS custom properties (``--live``, ``--invalid``, ``--k-record``, ...), so the page, the widget
and the pictures say the same thing in the same colour. Nothing here imports matplotlib.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from cgviz.trace.model import Block

__all__ = [
    "TREE_STYLE",
    "css_variables",
    "page_theme_css",
    "PAGE_LIGHT",
    "PAGE_DARK",
    "NODE_PALETTE",
    "node_color",
    "STEP_COLORS",
    "STEP_LABELS",
    "step_color",
    "FREE_COLOR",
    "UNOWNED_COLOR",
    "UNOWNED_HATCH",
    "INPUT_HATCH",
    "EDGE_COLOR",
    "HIGHLIGHT_EDGE",
    "TEXT_COLOR",
    "MUTED_TEXT",
    "BLOCK_CATEGORIES",
    "block_category",
    "block_style",
    "text_color_on",
]

#: tab20 without its greys (+ tab20b's indigo): ten strong hues, then their light variants.
NODE_PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#393b79",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
    "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#9c9ede",
)


def node_color(node_id: Optional[int]) -> str:
    """The colour of node `node_id` in every view (a hex string); None: the unowned grey."""
    if node_id is None:
        return UNOWNED_COLOR
    return NODE_PALETTE[int(node_id) % len(NODE_PALETTE)]


#: One colour per step kind (Okabe–Ito, colour-blind safe), in STEP_KINDS order.
STEP_COLORS: dict[str, str] = {
    "warmup": "#e69f00",  # orange: eager run before recording (the tree view's warmup fill)
    "record": "#0072b2",  # blue: a graph is captured (the tree view's graph blue)
    "execute": "#009e73",  # bluish green: a replay, the fast path
    "eager": "#cc79a7",  # reddish purple: could not be graphed, ran eagerly
    "generation": "#000000",  # black: a new generation begins
    "path_end": "#a0a0a0",  # grey: the path's outputs all died
    "checkpoint_restore": "#56b4e9",  # sky blue: allocator state put back before recording
    "error": "#d55e00",  # vermilion: an exception
    "compile": "#8f7f00",  # olive (Okabe-Ito's yellow, darkened to be read as text on light and dark pages):
    # torch.compile decided while compiling (a skip, a graph break, a partition)
    # a CUDA graph made outside the trees (`cgviz.observe_graphs`); mid-light hues, readable as text on light and
    # dark pages
    "capture": "#7b61c9",  # violet: the graph is captured (record's counterpart, not its blue)
    "replay": "#3d8b37",  # leaf green: the graph is replayed (execute's kin, less blue than its bluish green)
    "destroy": "#8d6e63",  # brown grey: the graph is destroyed (a quiet end, warmer than path end's grey)
}

#: How a step kind reads in a legend.
STEP_LABELS: dict[str, str] = {
    "warmup": "warmup",
    "record": "record",
    "execute": "execute (replay)",
    "eager": "eager fallback",
    "generation": "generation step",
    "path_end": "path end",
    "checkpoint_restore": "checkpoint restore",
    "error": "error",
    "compile": "compile-time decision",
    "capture": "graph capture",
    "replay": "graph replay",
    "destroy": "graph destroyed",
}

_UNKNOWN_STEP = "#7f7f7f"


def step_color(kind: str) -> str:
    """The colour of a step kind (a mid grey for a kind this version does not know)."""
    return STEP_COLORS.get(kind, _UNKNOWN_STEP)


# --- the pool -------------------------------------------------------------------------

FREE_COLOR = "#e9ecef"  # free space: light grey, recedes behind the blocks in use
UNOWNED_COLOR = "#868e96"  # allocated but no live output in it: intermediate or stale
UNOWNED_HATCH = "x"
INPUT_HATCH = "////"  # an input buffer: its node's colour, hatched
EDGE_COLOR = "#ffffff"  # thin white seams between neighbouring blocks
HIGHLIGHT_EDGE = "#111111"
TEXT_COLOR = "#1f2933"
MUTED_TEXT = "#52606d"
ON_COLOR = "#ffffff"  # text on a dark coloured fill: a pool block, the page's run button

#: What a pool block can be, in legend order.
BLOCK_CATEGORIES: dict[str, str] = {
    "output": "node output",
    "input": "input buffer (hatched)",
    "unowned": "allocated, no live output (intermediate or stale)",
    "free": "free",
}

_INPUT_OWNER = re.compile(r"\binput\b")


def block_category(block: "Block") -> str:
    """'free', 'output' (a node's output), 'input' (a node's input buffer) or 'unowned'.

    Free is decided by the allocator's flag alone: a free block that still carries an
    owner's name (older traces name the output that used to be there) is free space.
    """
    if not block.allocated:
        return "free"
    if block.node is None:
        return "unowned"
    if block.output is None and (block.owner is None or _INPUT_OWNER.search(block.owner)):
        return "input"
    return "output"


def block_style(block: "Block") -> tuple[str, str, str]:
    """(category, face colour, hatch) of a pool block; hatch '' when plain."""
    category = block_category(block)
    if category == "free":
        return category, FREE_COLOR, ""
    if category == "unowned":
        return category, UNOWNED_COLOR, UNOWNED_HATCH
    if category == "input":
        return category, node_color(block.node), INPUT_HATCH
    return category, node_color(block.node), ""


def text_color_on(hex_color: str) -> str:
    """Dark or white text, whichever reads better on `hex_color`."""
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) / 255 for i in (0, 2, 4))

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    lum = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    # contrast against white (1.05) vs against near-black text (~0.03)
    return ON_COLOR if (1.05 / (lum + 0.05)) > ((lum + 0.05) / 0.06) else TEXT_COLOR


# --- the tree -------------------------------------------------------------------------

#: The tree view's colours and widths (fills say what a node is, borders where the path is).
TREE_STYLE: dict[str, object] = {
    "font": "Helvetica,Arial,sans-serif",
    "background": "#ffffff",
    "text": "#1f2933",
    "muted": "#52606d",
    # fills: what the node is
    "warmup_fill": "#ffe3a3",
    "warmup_border": "#b7791f",
    "graph_fill": "#d5e7fb",
    "graph_border": "#3b6ea8",
    "active_fill": "#bdebb5",  # touched by this step: replaying, just recorded, warming up
    "invalid_warmup_fill": "#ede8df",  # some output was invalidated by a new generation:
    "invalid_graph_fill": "#e3e7ec",  # grey, tinted by kind
    "invalid_border": "#8a8a8a",
    "invalid_text": "#6b6b6b",
    # borders: where the current path is
    "border_width": 1.2,
    "path_border": "#1b3a5c",
    "path_width": 2.6,
    "current_border": "#8e24aa",
    "current_width": 4.0,
    "selected_border": "#e8590c",
    "selected_width": 2.2,
    # output marks
    "live": "#2f855a",
    "dead": "#616e7c",
    "invalid": "#c62828",
    # edges
    "edge": "#8795a1",
    "path_edge": "#1b3a5c",
    "edge_label": "#52606d",
    # badges ("▶ replaying now", ...)
    "badge": "#2f6b3a",
    "badge_alert": "#c62828",
    "badge_current": "#8e24aa",
    "note_fill": "#f4f5f7",
}


# --- the page -------------------------------------------------------------------------

POOL_LINE = "#adb5bd"  # the pool's bars and swatches, and a free block's edge, on the page
BLOCK_SEAM = "#343a40"  # the thin edge of a block in use on the page's pool bars
HATCH_INK = "#000000"  # input and unowned blocks' hatching on the page (darkened at 35–40 %)


def css_variables() -> str:
    """The palette as CSS custom properties, for the explorer's page and widget (light; the
    page's dark themes invert pictures and keep these hues)."""
    props = {
        "--live": TREE_STYLE["live"], "--dead": TREE_STYLE["dead"], "--invalid": TREE_STYLE["invalid"],
        "--selected": TREE_STYLE["selected_border"], "--free": FREE_COLOR, "--unowned": UNOWNED_COLOR,
        "--picture-text": TEXT_COLOR, "--picture-muted": MUTED_TEXT, "--highlight": HIGHLIGHT_EDGE,
        "--paper": TREE_STYLE["background"], "--pool-line": POOL_LINE, "--block-seam": BLOCK_SEAM,
        "--hatch": HATCH_INK, "--on-color": ON_COLOR,
    }
    props.update({f"--k-{kind}": color for kind, color in STEP_COLORS.items()})
    return ";".join(f"{k}:{v}" for k, v in props.items())


# --- the page's frame around the pictures ---------------------------------------------------

#: The page's own colours (text, lines, panels, banners), light. Those JupyterLab's themes set
#: follow them (PAGE_JUPYTER names its variable for each); the values here stand in elsewhere.
PAGE_LIGHT: dict[str, str] = {
    "fg": TEXT_COLOR, "muted": MUTED_TEXT, "line": "#d9dee4", "bg": "#f6f7f9", "panel": "#ffffff",
    "hover": "#f3f6f9", "warn": "#b45309", "picture-bg": str(TREE_STYLE["background"]), "banner-bg": "#fff4e6",
    "banner-line": "#f0b37e", "banner-fg": "#7c2d12", "current-ring": "#f5b07a", "no-kind": "#888888",
}
PAGE_JUPYTER: dict[str, str] = {
    "fg": "--jp-content-font-color1", "muted": "--jp-content-font-color2", "line": "--jp-border-color2",
    "bg": "--jp-layout-color2", "panel": "--jp-layout-color0", "hover": "--jp-layout-color2",
}
#: Dark (`.cg-dark`: the exported page in a dark colour scheme, marimo's dark theme). In
#: JupyterLab's and VS Code's dark themes their variables give the colours PAGE_JUPYTER names.
PAGE_DARK: dict[str, str] = {
    "fg": "#e4e7eb", "muted": "#9aa5b1", "line": "#3e4c59", "bg": "#111418", "panel": "#1b1f24",
    "hover": "#262b31", "picture-bg": "#1f1f1f", "banner-bg": "#3b2a1a", "banner-line": "#8a5a2b",
    "banner-fg": "#f5c9a0", "err": "#f87171", "warn": "#f5a25d",
}
#: The selectors of a dark page: the front end's own, and JupyterLab's and VS Code's dark themes.
DARK_PAGE = ".cgviz.cg-dark"
DARK_HOSTS = 'body[data-jp-theme-light="false"] .cgviz,body.vscode-dark .cgviz'
#: How a dark page shows the pictures, drawn on white (page.css's --picture-filter).
DARK_PICTURE_FILTER = "invert(.88) hue-rotate(180deg)"


def as_dark_picture(color: str) -> str:
    """A colour as DARK_PICTURE_FILTER shows it (CSS filters work on sRGB values): a step kind's
    colour beside the pictures, so that a dark page's step list and headline match its timeline."""
    rgb = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c + 0.88 * (1 - 2 * c) for c in rgb)  # invert(.88)
    # hue-rotate(180deg): the Filter Effects matrix with cos = -1, sin = 0
    out = (-0.574 * r + 1.430 * g + 0.144 * b, 0.426 * r + 0.430 * g + 0.144 * b, 0.426 * r + 1.430 * g - 0.856 * b)
    return "#" + "".join(f"{round(255 * min(1.0, max(0.0, c))):02x}" for c in out)


def page_theme_css() -> str:
    """The page's frame colours as CSS custom properties of `.cgviz` (page.css reads them and
    names no colour itself): light, following JupyterLab's theme where it sets one; dark, with
    the step kinds' colours as the dark pictures show them."""
    light = [f"--{k}:var({PAGE_JUPYTER[k]},{v})" if k in PAGE_JUPYTER else f"--{k}:{v}" for k, v in PAGE_LIGHT.items()]
    light += [f"--accent:var(--selected,{TREE_STYLE['selected_border']})", f"--err:var(--invalid,{TREE_STYLE['invalid']})"]
    kinds = [f"--k-{kind}:{as_dark_picture(color)}" for kind, color in STEP_COLORS.items()]
    hosts = [f"--{k}:{v}" for k, v in PAGE_DARK.items() if k not in PAGE_JUPYTER] + kinds
    dark = [f"--{k}:{v}" for k, v in PAGE_DARK.items()] + kinds
    return f".cgviz{{{';'.join(light)}}}{DARK_HOSTS}{{{';'.join(hosts)}}}{DARK_PAGE}{{{';'.join(dark)}}}"
