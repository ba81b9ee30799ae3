"""The HTML export: a whole trace as one self-contained page that opens offline.

    page = to_html(trace)                       # the page as text
    to_html(trace, "run.html")                  # ... also written (atomically) to run.html

The page is the explorer's front end (views/page/explorer*.js, inline as one module) mounted on
the whole payload (`page_data`), embedded as JSON (gzipped past `COMPRESS_ABOVE` bytes, and
opened by the browser's own DecompressionStream): no kernel, nothing fetched. A gzipped payload
of a long trace comes in two parts: the page shows its first steps, then decodes the rest
(`page_split`). ⏮ ◀ ▶ ⏭, a
slider, the arrow keys (Home/End for the first and last step), a click on a step in the list
or on the timeline; a click on a tree node pins it. `#step=N` (1-based, as in the headline)
and `#step=N&node=M` in the address open the page at that step and node. How pictures are
kept small is told in `page_data` and `page_store`.
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import json
import re
from importlib import resources
from typing import TYPE_CHECKING, Any, Optional

from cgviz.trace.io import check_save_target, with_safe_text, write_atomic
from cgviz.trace.model import require_trace, safe_text
from cgviz.views.page_data import KIND_COLORS, page_whole
from cgviz.views.page_split import join_parts, split_whole

if TYPE_CHECKING:
    from cgviz.trace.model import Trace
    from cgviz.views.page_data import Progress
    from cgviz.views.page_split import FirstCut

__all__ = ["to_html", "page_payload", "page_parts", "KIND_COLORS", "asset", "explorer_module"]


def to_html(trace: "Trace", path: Any = None, *, title: Optional[str] = None, renderer: str = "auto",
            progress: Optional["Progress"] = None) -> str:
    """The trace as one self-contained HTML page; also written to `path` when given.

    `renderer` draws the trees: "graphviz", "builtin", or "auto" (Graphviz when `dot` is
    installed and the trace is small enough to lay out every distinct tree in about ten
    seconds, else the built-in layout). The file is written atomically: a temporary file
    beside `path`, renamed over it (see `write_atomic` for what is refused). Lone surrogates
    in the trace's text or the title are shown as their escape text (`safe_text`), since UTF-8
    cannot encode them. `progress(done, total, what)` hears how far building the page is
    (`page_data`; ``what``: "steps", then "trees"), for a progress bar; in a Jupyter kernel,
    without one, a line on the cell's stderr shows it once the export has taken a second.
    """
    require_trace(trace, "to_html()")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a string, not {type(title).__name__}")
    if renderer not in ("auto", "graphviz", "builtin"):
        raise ValueError(f"unknown renderer {renderer!r}: use 'auto', 'graphviz' or 'builtin'")
    if path is not None:
        check_save_target(path, "HTML")  # before building the page, which can take a while
    bar = None
    if progress is None and _in_kernel():  # a notebook: a line on the cell's stderr once it takes a second
        from cgviz.progress import ProgressBar

        progress = bar = ProgressBar(rewrites=True)
    try:
        data, cut = page_whole(with_safe_text(trace), title=title and safe_text(title), renderer=renderer,
                               progress=progress)
    finally:
        if bar is not None:
            bar.close()
    page = render_page(data, cut=cut)
    if path is not None:
        write_atomic(path, lambda fh: fh.write(page), "HTML")
    return page


def _in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (whose stderr shows "\\r" as a line rewrite)."""
    import sys

    shell = sys.modules.get("IPython")
    ip = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


#: Payloads larger than this (bytes of JSON) are stored gzipped and base64-encoded: a trace of
#: thousands of steps repeats itself, so its page shrinks about fifteen-fold.
COMPRESS_ABOVE = 512 * 1024


def render_page(data: dict, compress: Optional[bool] = None, cut: Optional["FirstCut"] = None) -> str:
    """The standalone page around a payload: the explorer's style and module, inline; the
    payload as JSON, or gzipped (`compress`; default: above `COMPRESS_ABOVE` bytes). A gzipped
    payload with a `cut` (`page_whole`) goes in two parts, its first steps' pictures first: the
    page shows those before it decodes the rest (`page_split`)."""
    if compress is not False:
        parts = [_encode(part) for part in split_whole(data, cut)] if cut is not None else [_encode(data)]
        if compress or sum(map(len, parts)) > COMPRESS_ABOVE:
            return _page(data, "\n".join(_packed(tag, part) for tag, part in zip(("cgviz-data", "cgviz-rest"), parts)))
    # as it is, safe inside <script>: no "</script>", "<!--" or "]]>" can appear
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _page(data, _script("cgviz-data", "application/json", "", payload))


_PAYLOAD_TAG = re.compile(r'<script type="[^"]+" id="(cgviz-data|cgviz-rest)"( data-encoding="gzip-base64")?>(.*?)</script>',
                          re.S)


def page_parts(page: str) -> list[dict]:
    """The payload parts a page written by `render_page` carries, in order: one, or a long
    trace's first steps and the rest (`page_split.join_parts` makes them whole again). For tools
    and tests that read a page back."""
    parts = []
    for m in _PAYLOAD_TAG.finditer(page):
        text = m.group(3)
        if m.group(2):
            text = gzip.decompress(base64.b64decode(text)).decode("ascii")
        parts.append(json.loads(text))
    if not parts:
        raise ValueError("not a cgviz page: it carries no payload")
    return parts


def page_payload(page: str) -> dict:
    """The whole payload a page written by `render_page` carries (its parts joined)."""
    parts = page_parts(page)
    return join_parts(*parts) if len(parts) == 2 else parts[0]


def _page(data: dict, scripts: str) -> str:
    return asset("page.html").format(title=html.escape(data["title"]), css=page_css(), payloads=scripts,
                                     js=explorer_module())


def _encode(data: dict) -> str:
    # a gzipped payload's JSON is ASCII (other characters as \u escapes, a few bytes more once
    # gzipped): the browser decodes ASCII bytes several times faster than UTF-8, and parses a
    # one-byte string
    return json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def _packed(tag_id: str, payload: str) -> str:
    """A payload's script element, its JSON gzipped and in base64."""
    packed = base64.b64encode(gzip.compress(payload.encode("ascii"), compresslevel=6, mtime=0)).decode("ascii")
    return _script(tag_id, "application/octet-stream", ' data-encoding="gzip-base64"', packed)


def _script(tag_id: str, kind: str, attrs: str, text: str) -> str:
    return f'<script type="{kind}" id="{tag_id}"{attrs}>{text}</script>'


def page_css() -> str:
    """The explorer's style sheet, for the page and the widget: the frame's colours (views/style.py),
    page.css, and the tree's path edges."""
    from cgviz.views.style import page_theme_css
    from cgviz.views.tree.frames import EDGE_CSS

    return page_theme_css() + asset("page.css") + EDGE_CSS


#: The front end's files, in the order they make one module: the logic (no document: Node runs
#: its unit tests, tests/js), the panels drawn from data, then the explorer that mounts them.
MODULE_PARTS = ("explorer_logic.js", "explorer_panels.js", "explorer.js")


def explorer_module() -> str:
    """The explorer's module, as the page inlines it and the widget loads it (`_esm`)."""
    return "\n".join(asset(name) for name in MODULE_PARTS)


@functools.lru_cache(maxsize=None)
def asset(name: str) -> str:
    """A file of the front end in cgviz/views/page/ (the page's template, the style, the module)."""
    return resources.files("cgviz.views").joinpath("page").joinpath(name).read_text(encoding="utf-8")
