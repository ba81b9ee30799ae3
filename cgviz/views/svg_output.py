"""Figures to SVG and PNG: the same bytes for the same figure, and artists that write their own SVG.

matplotlib's SVG backend writes each path of a collection with ~0.15 ms of Python and measures
each text with FreeType before placing it (~0.5 ms a label). The pool view has thousands of
blocks and stripes and up to a few hundred labels, so its rectangles, stripes and labels are
artists (`svg_artists`) that write their own elements when saved to SVG, where matplotlib would
put them, and draw as usual elsewhere (Agg for PNG). matplotlib is imported lazily.
"""

from __future__ import annotations

import functools
import html
import io
import re
import threading
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# --- artists that write their own SVG ------------------------------------------------------


def _svg_renderer(renderer):
    """The SVG renderer doing the drawing, or None (savefig wraps it in a MixedModeRenderer)."""
    from matplotlib.backends.backend_svg import RendererSVG

    inner = getattr(renderer, "_renderer", renderer)
    return inner if isinstance(inner, RendererSVG) else None


def _per_item(values, n: int) -> list:
    """A collection property (one value or one per item) as a list of one value per item."""
    import numpy as np

    values = np.asarray(values)
    if len(values) != n:
        values = np.resize(values, (n,) + values.shape[1:])
    return [tuple(v) for v in values.tolist()] if values.ndim > 1 else values.tolist()


def _svg_style(face, edge, width: float) -> str:
    """The inline style matplotlib's SVG backend writes for a path (same properties, same order)."""
    from matplotlib.colors import rgb2hex

    parts = ["fill: none"] if face is None else [f"fill: {rgb2hex(face)}"]
    if face is not None and face[3] < 1:
        parts.append(f"fill-opacity: {face[3]:g}")
    if width > 0:
        parts.append(f"stroke: {rgb2hex(edge)}")
        if edge[3] < 1:
            parts.append(f"stroke-opacity: {edge[3]:g}")
        parts.append(f"stroke-width: {width:g}")
    return "; ".join(parts)


def _svg_points(svg, artist, points):
    """Points in the artist's coordinates as (n, 2) SVG user units (y down)."""
    import numpy as np

    out = artist.get_transform().transform(np.asarray(points, dtype=float).reshape(-1, 2))
    out[:, 1] = svg.height - out[:, 1]
    return out


def _write_rects(svg, coll) -> None:
    """Each rectangle of a collection as one `<path>` (in an `<a>` where it has a URL)."""
    import numpy as np

    verts = [p.vertices for p in coll.get_paths()]
    n = len(verts)
    if n == 0:
        return
    starts = np.cumsum([0] + [len(v) for v in verts[:-1]])
    every = np.concatenate(verts)
    corners = _svg_points(svg, coll, np.stack([np.minimum.reduceat(every, starts),
                                               np.maximum.reduceat(every, starts)], 1)).reshape(n, 4).tolist()
    looks = zip(_per_item(coll.get_facecolor(), n), _per_item(coll.get_edgecolor(), n),
                _per_item(coll.get_linewidths(), n))
    urls = list(coll.get_urls()) + [None] * n
    styles: dict[tuple, str] = {}
    svg.open_group("rects", coll.get_gid())
    raw = _raw_writer(svg.writer)
    if raw is not None:  # the same bytes as the writer's start/element/end, written as one text
        write, depth, _attr = raw
        pad, inner = " " * depth, " " * (depth + 1)
        parts = []
        for (xa, ya, xb, yb), look, url in zip(corners, looks, urls):
            style = styles.get(look) or styles.setdefault(look, _attr(_svg_style(*look)))
            outline = f"M {xa:.2f} {ya:.2f} L {xb:.2f} {ya:.2f} L {xb:.2f} {yb:.2f} L {xa:.2f} {yb:.2f} z"
            if url:
                parts.append(f'{pad}<a xlink:href={_attr(url)} target="_blank">\n{inner}<path d="{outline}" '
                             f'style={style}/>\n{pad}</a>\n')
            else:
                parts.append(f'{pad}<path d="{outline}" style={style}/>\n')
        write("".join(parts))
    else:
        for (xa, ya, xb, yb), look, url in zip(corners, looks, urls):
            style = styles.get(look) or styles.setdefault(look, _svg_style(*look))
            if url:
                svg.writer.start("a", {"xlink:href": url, "target": "_blank"})
            outline = f"M {xa:.2f} {ya:.2f} L {xb:.2f} {ya:.2f} L {xb:.2f} {yb:.2f} L {xa:.2f} {yb:.2f} z"
            svg.writer.element("path", d=outline, style=style)
            if url:
                svg.writer.end("a")
    svg.close_group("rects")


def _raw_writer(writer):
    """(write, depth, quote) to append raw elements after the open tag of `writer` is closed, where
    matplotlib's XML writer has the attributes for it (else None: write element by element).
    A pool has a thousand blocks; the writer's per-element escaping and calls cost ~20 µs each."""
    flush = getattr(writer, "_XMLWriter__flush", None)
    write = getattr(writer, "_XMLWriter__write", None)
    tags = getattr(writer, "_XMLWriter__tags", None)
    try:  # an attribute value quoted and escaped as that writer does
        from matplotlib.backends.backend_svg import _quote_escape_attrib
    except ImportError:
        return None
    if flush is None or write is None or not isinstance(tags, list):
        return None
    flush()
    return write, len(tags), _quote_escape_attrib


def _write_stripes(svg, coll) -> None:
    """The line segments of a collection as one `<path>` per colour and width."""
    segs = coll.get_segments()
    n = len(segs)
    if n == 0:
        return
    ends = _svg_points(svg, coll, segs).reshape(n, 4).tolist()
    paths: dict[tuple, list[str]] = {}
    for (xa, ya, xb, yb), color, width in zip(ends, _per_item(coll.get_colors(), n),
                                              _per_item(coll.get_linewidths(), n)):
        paths.setdefault((color, width), []).append(f"M {xa:.2f} {ya:.2f} L {xb:.2f} {yb:.2f}")
    svg.open_group("stripes", coll.get_gid())
    for (color, width), moves in paths.items():
        svg.writer.element("path", d=" ".join(moves), style=_svg_style(None, color, width))
    svg.close_group("stripes")


_GENERIC_FAMILIES = ("serif", "sans-serif", "cursive", "fantasy", "monospace")
_ANCHORS = {"left": "start", "center": "middle", "right": "end"}


def _css_font_family(families: tuple[str, ...]) -> str:
    """The CSS font-family matplotlib's SVG backend writes: each generic family preceded by
    the fonts configured for it (rcParams), specific names quoted."""
    import matplotlib

    names = []
    for family in families:
        family = "sans-serif" if family in ("sans", "sans serif") else family
        if family in _GENERIC_FAMILIES:
            names += [repr(name) for name in matplotlib.rcParams[f"font.{family}"]]
        names.append(family if family in _GENERIC_FAMILIES else repr(family))
    return ", ".join(dict.fromkeys(names))


@functools.cache
def _line_height_em(font_path: str) -> float:
    """The height of a line of text in ems, from the font's tables as matplotlib takes it."""
    from matplotlib.font_manager import get_font

    font = get_font(font_path)
    em = font.get_sfnt_table("head")["unitsPerEm"]
    for table, ascent, descent in (("OS/2", "sTypoAscender", "sTypoDescender"), ("hhea", "ascent", "descent")):
        values = font.get_sfnt_table(table)
        if values is not None:
            return (values[ascent] - values[descent]) / em
    return 1.2


@functools.lru_cache(maxsize=4096)
def _ink_em(line: str, font_path: str) -> tuple[float, float]:
    """(ascent, descent) of a line's glyphs in ems, measured as matplotlib's SVG backend
    measures text to place it (at 100 px, unhinted, in 1/64 px); kept, as the same
    labels come back in every picture of a pool."""
    from matplotlib.font_manager import get_font
    from matplotlib.ft2font import LoadFlags

    font = get_font(font_path)
    font.set_size(100, 72)
    font.set_text(line, 0.0, flags=LoadFlags.NO_HINTING)
    height, descent = font.get_width_height()[1] / 6400, font.get_descent() / 6400
    return height - descent, descent


def _plain_label(text) -> bool:
    """A text `_write_label` writes as matplotlib would: unrotated, centred vertically, its
    line spacing a number, no box around it, no alpha of its own."""
    return (bool(text.get_text()) and text.get_verticalalignment() == "center" and not text.get_rotation()
            and text.get_linespacing() != "normal" and text.get_bbox_patch() is None and text.get_alpha() is None)


def _write_label(svg, text) -> None:
    """A text's lines as `<text>` elements where matplotlib would put them: the anchor by
    text-anchor, each line's glyphs centred in a line of the font's line height."""
    from matplotlib.colors import rgb2hex
    from matplotlib.font_manager import findfont

    prop = text.get_fontproperties()
    size = prop.get_size_in_points()  # in SVG a point is a unit
    path = findfont(prop)
    line_h = text.get_linespacing() * _line_height_em(path) * size
    lines = text.get_text().split("\n")
    ((x, y),) = _svg_points(svg, text, text.get_unitless_position())
    top = y - len(lines) * line_h / 2
    style = [f"font-size: {size:g}px", f"font-family: {_css_font_family(tuple(prop.get_family()))}",
             f"text-anchor: {_ANCHORS[text.get_horizontalalignment()]}"]
    if rgb2hex(text.get_color()) != "#000000":
        style.append(f"fill: {rgb2hex(text.get_color())}")
    svg.open_group("text", text.get_gid())
    for i, line in enumerate(lines):
        ascent, descent = _ink_em(line, path)
        baseline = top + i * line_h + (line_h + (ascent - descent) * size) / 2
        svg.writer.element("text", line, x=f"{x:.2f}", y=f"{baseline:.2f}", style="; ".join(style))
    svg.close_group("text")


@functools.cache
def svg_artists():
    """Rectangles, hatch stripes and labels that write their own SVG: (Rects, Stripes, Label).

    matplotlib's SVG backend styles and writes each path of a collection separately (about
    0.15 ms a path) and measures every text with FreeType before placing it (about 0.5 ms a
    label); a pool has thousands of blocks and stripes and up to a few hundred labels.
    These write one `<path>` per rectangle (in a link where it has a URL, as the backend
    does), one `<path>` of all stripes per colour, and a label's lines where matplotlib
    would put them (each distinct line measured once); other renderers (Agg for PNG) draw
    them as usual, and so does SVG a label `_plain_label` does not describe. Defined on
    first use: matplotlib is imported lazily.
    """
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.text import Text

    def drawn_by(base, write, plain=lambda artist: True):
        def draw(self, renderer):
            svg = _svg_renderer(renderer)
            if svg is None or not self.get_visible() or not plain(self):
                return base.draw(self, renderer)
            write(svg, self)
            self.stale = False

        return draw

    class Rects(PolyCollection):
        draw = drawn_by(PolyCollection, _write_rects)

    class Stripes(LineCollection):
        draw = drawn_by(LineCollection, _write_stripes)

    class Label(Text):
        draw = drawn_by(Text, _write_label, _plain_label)

    return Rects, Stripes, Label


# --- text drawn as it is ------------------------------------------------------------------
#: rcParams while a figure is saved: text is never read as mathtext or TeX (a tick label made
#: while drawing takes its parse_math from here).
LITERAL_RC = {"text.parse_math": False, "text.usetex": False}


def literal_texts(fig: "Figure") -> "Figure":
    """Every text of `fig` drawn as it is: no mathtext (a name "$x^2$" stays "$x^2$", and
    "$\\frac{$" does not stop the drawing) and no TeX. Names in the views come from traces,
    which anyone may write. Returns `fig`."""
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        text.set_parse_math(False)
        text.set_usetex(False)
    return fig


# --- what a drawing may hold ---------------------------------------------------------------
# Elements that run or load something, or change attributes over time (an <animate> or <set>
# can turn an href into a script): no drawing of cgviz has them.
_ACTIVE_ELEMENTS = ("script", "foreignobject", "iframe", "object", "embed", "animate", "set", "animatemotion",
                    "animatetransform", "handler", "listener")
# anything that might be one of them, or an event handler, or a link out of the drawing (a quick
# look: what it finds is then looked at tag by tag, and text that merely reads so is left alone)
_RISKY_RE = re.compile(r"<\s*/?\s*(?:" + "|".join(_ACTIVE_ELEMENTS) + r")\b"  # an active element
                       r"|\bon[a-z]+\s*="  # an event handler
                       r"|href\s*=\s*(?:[\"'](?!#)|[^\s\"'#])", re.I)  # a link not to #…
_ACTIVE_RE = re.compile(r"<\s*(" + "|".join(_ACTIVE_ELEMENTS) + r")\b[^>]*?(?:/>|>.*?<\s*/\s*\1\s*>)", re.I | re.S)
_TAG_RE = re.compile(r"<(/?)([A-Za-z][\w:.-]*)((?:\s+[^\s=/>]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'>]+))?)*)\s*(/?)>")
_TAG_ATTR_RE = re.compile(r"\s+([^\s=/>]+)(?:\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s\"'>]+))?")
# the pixels an <image> may carry: a PNG or JPEG in the drawing itself (matplotlib draws a dense
# row of steps so), which runs nothing and loads nothing
_RASTER_RE = re.compile(r"data:image/(?:png|jpeg);base64,[A-Za-z0-9+/=\s]*")


def safe_svg(svg: str) -> str:
    """`svg` with nothing in it that runs or leads out of the drawing: no script, foreign
    content or animation element, no event handler (``on*``) attribute, no ``target``, and no
    link (``href``, ``xlink:href``) but to ``#…`` in the same page, or an ``<image>``'s own PNG
    or JPEG pixels. cgviz writes none of them;
    this checks what Graphviz (or matplotlib) returned, whatever the text drawn in it. A
    drawing without any comes back as it is (one quick search)."""
    if not _RISKY_RE.search(svg):
        return svg
    for _ in range(8):  # nested ones come out from the inside
        svg, n = _ACTIVE_RE.subn("", svg)
        if not n:
            break
    return _TAG_RE.sub(_safe_tag, svg)


def _safe_tag(m: "re.Match") -> str:
    close, name, attrs, empty = m.groups()
    if name.lower().rsplit(":", 1)[-1] in _ACTIVE_ELEMENTS:
        return ""
    if not attrs:
        return m.group(0)
    kept = []
    for a in _TAG_ATTR_RE.finditer(attrs):
        key, value = a.group(1).lower(), (a.group(2) or "").strip("\"'").strip()
        if key.startswith("on") or key == "target" or (key.rsplit(":", 1)[-1] == "href" and not (
                value.startswith("#") or (name.lower() == "image" and _RASTER_RE.fullmatch(value)))):
            continue
        kept.append(a.group(0))
    return f"<{close}{name}{''.join(kept)}{' ' if empty and kept else ''}{empty}>"


# --- output -------------------------------------------------------------------------------

_SVG_LOCK = threading.Lock()
# ids hashed with a fixed salt; text as <text> (written as glyph outlines, text costs
# several times more to save, and the words could not be selected or searched)
_SVG_RC = {"svg.hashsalt": "cgviz", "svg.fonttype": "none"}
_SVG_LINK = re.compile(r'<a xlink:href="#((?:block|step)-[0-9a-zA-Z_-]+)" target="_blank">(.*?)</a>', re.S)


def figure_svg(fig: "Figure", titles: Optional[dict[str, str]] = None) -> str:
    """A figure as SVG text, the same bytes for the same figure.

    No date or creator metadata, ids hashed with a fixed salt, and each element linked to
    ``#block-…``/``#step-…`` (collection URLs) turned into a group with that id, holding a
    ``<title>`` (a tooltip in a browser) where `titles` has one for the id.
    """
    import matplotlib

    buf = io.BytesIO()
    literal_texts(fig)
    with _SVG_LOCK, matplotlib.rc_context({**_SVG_RC, **LITERAL_RC}):  # read from rcParams while saving
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue().decode("utf-8")
    titles = titles or {}

    def group(m: "re.Match") -> str:
        title = titles.get(m.group(1))
        head = f"<title>{html.escape(title)}</title>" if title else ""
        return f'<g id="{m.group(1)}">{head}{m.group(2)}</g>'

    return safe_svg(_SVG_LINK.sub(group, text))


def figure_png(fig: "Figure", dpi: float = 100) -> bytes:
    """A figure as PNG bytes (no software metadata), its texts drawn as they are (`literal_texts`)."""
    buf = io.BytesIO()
    literal_texts(fig)
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


