"""The shapes the pool's bars and its legend share: rectangles in one collection, and
hatching drawn as stripes (matplotlib's own hatching costs ~0.4 ms a patch)."""

from __future__ import annotations

from cgviz.views.style import INPUT_HATCH, UNOWNED_HATCH
from cgviz.views.svg_output import svg_artists

FONT = 7.5  # block and legend labels, in points
# hatch -> (spacing of its stripes in inches, their directions: 1 is /, -1 is \)
_HATCH_LINES = {INPUT_HATCH: (0.055, (1,)), UNOWNED_HATCH: (0.09, (1, -1))}


def rect_verts(x0, x1, y0, y1):
    """(n, 4, 2) corners of rectangles given as arrays of their edges."""
    import numpy as np

    return np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1), np.stack([x0, y1], 1)], 1)


def hatch_lines(rects, spacing: float, directions: tuple[int, ...]):
    """Hatch lines for axis-aligned rectangles, in the rectangles' own (inch) units.

    `rects` is an (n, 4) array of x0, x1, y0, y1. Lines run at 45°, one every `spacing` along
    x on a grid shared by all rectangles (so stripes of neighbours line up), clipped to each
    rectangle. Returns (segments (m, 2, 2), index of the rectangle of each segment).
    """
    import numpy as np

    segs, owner = [], []
    for i, (x0, x1, y0, y1) in enumerate(rects):
        for d in directions:
            # the line x = d*y + c crosses the rectangle for c in [lo, hi]
            lo, hi = (x0 - y1, x1 - y0) if d == 1 else (x0 + y0, x1 + y1)
            c = np.arange(np.ceil(lo / spacing), np.floor(hi / spacing) + 1) * spacing
            if not len(c):
                continue
            if d == 1:  # y in [x0 - c, x1 - c] ∩ [y0, y1]
                ya, yb = np.maximum(y0, x0 - c), np.minimum(y1, x1 - c)
            else:  # y in [c - x1, c - x0] ∩ [y0, y1]
                ya, yb = np.maximum(y0, c - x1), np.minimum(y1, c - x0)
            keep = yb > ya
            ya, yb, c = ya[keep], yb[keep], c[keep]
            segs.append(np.stack([np.stack([d * ya + c, ya], 1), np.stack([d * yb + c, yb], 1)], 1))
            owner.extend([i] * len(c))
    if not segs:
        return np.zeros((0, 2, 2)), np.zeros(0, dtype=int)
    return np.concatenate(segs), np.array(owner, dtype=int)


def stripe_collection(rects, colors, hatch: str, gid: str, unit_in: tuple[float, float] = (1.0, 1.0), **kw):
    """Stripes hatching rectangles, one colour each, as one collection (matplotlib's own
    hatching costs ~0.4 ms a patch); None when no stripe crosses them.

    `rects` is (n, 4): x0, x1, y0, y1 in inches, so that stripes run at 45° on the page; the
    segments come out in units of `unit_in` inches along x and y (the axes' data units).
    """
    spacing, directions = _HATCH_LINES[hatch]
    segs, owner = hatch_lines(rects, spacing, directions)
    if not len(segs):
        return None
    segs[:, :, 0] /= unit_in[0]
    segs[:, :, 1] /= unit_in[1]
    _, Stripes, _ = svg_artists()
    stripes = Stripes(segs, colors=colors[owner], linewidths=0.8, zorder=2.1, **kw)
    stripes.set_gid(gid)
    return stripes
