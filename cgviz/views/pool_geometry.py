"""What the pool view draws of a snapshot, as data: each block's rectangle along its
segment's bar, the totals in the title, and the words for blocks and segments.

`pool_blocks` is the single source of truth of the pool view: the matplotlib figure
(`cgviz.views.pool_draw`) and the HTML page (`cgviz.views.pool_data`) both draw its rectangles.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

from cgviz.views.style import block_style
from cgviz.views.sums import added_in_turn
from cgviz.views.text import format_bytes, shown

if TYPE_CHECKING:
    from cgviz.trace.model import Segment, Snapshot

#: The narrowest a block is drawn, as a fraction of its segment's bar (~0.16 in by default):
#: wide enough to see its colour and, often, a short name.
MIN_BLOCK_FRACTION = 0.03

_OWNER_INPUT = re.compile(r"\binput (\d+)")


def _widths(sizes: list[int], total: int, min_frac: float) -> list[float]:
    """Bar fractions for consecutive pieces: to scale, pieces below the floor widened to it.

    The floor is `min_frac`, lowered to 0.5/n for n pieces so that widened pieces never take
    more than half the bar. The room is taken proportionally from the pieces above the
    floor (repeatedly, as shrinking one may push it under), so the bar still sums to 1.
    """
    n = len(sizes)
    if n == 0:
        return []
    if total <= 0:
        return [1.0 / n] * n
    floor = min(min_frac, 0.5 / n)
    fracs = [s / total for s in sizes]
    small = [f < floor for f in fracs]
    while True:
        big_total = added_in_turn(f for f, s in zip(fracs, small) if not s)
        rest = 1.0 - floor * sum(small)
        if big_total <= 0:
            return [1.0 / n] * n
        scale = rest / big_total
        grew = False
        for i, f in enumerate(fracs):
            if not small[i] and f * scale < floor:
                small[i] = True
                grew = True
        if not grew:
            return [floor if s else f * scale for f, s in zip(fracs, small)]


def pool_blocks(snapshot: Optional["Snapshot"], *, min_fraction: float = MIN_BLOCK_FRACTION) -> list[dict]:
    """Every block of every segment as the rectangle the pool view draws for it.

    One dict per block, segments in address order, blocks in address order within each:

    - ``segment``: row index (0 = top bar), ``segment_address``, ``segment_size``;
    - ``address``, ``size``, ``offset`` (address - segment address), ``requested``;
    - ``x``, ``width``: the drawn rectangle along its bar, as fractions of the bar (0..1);
      ``widened`` is True when the block was drawn wider than its true share;
    - ``category``: 'output', 'input', 'unowned' or 'free'; ``color`` (hex) and ``hatch``
      ('' for plain); ``node``, ``output`` (None when not a node's output);
    - ``label``: what the block is in words (its owner, or 'free').
    """
    out: list[dict] = []
    if snapshot is None:
        return out
    for row, seg in enumerate(sorted(snapshot.segments, key=lambda s: s.address)):
        out += segment_blocks(seg, row, min_fraction=min_fraction)
    return out


def segment_blocks(seg: "Segment", row: int = 0, *, min_fraction: float = MIN_BLOCK_FRACTION) -> list[dict]:
    """The blocks of one segment as `pool_blocks` draws them (row `row`): a segment's
    rectangles depend on it alone, so views that keep segments once draw each once."""
    out: list[dict] = []
    blocks = sorted(seg.blocks, key=lambda b: b.address)
    # pieces: the blocks, plus any gap between them (drawn as nothing)
    pieces: list[tuple[int, object]] = []
    cursor = seg.address
    for b in blocks:
        if b.address > cursor:
            pieces.append((b.address - cursor, None))
        pieces.append((b.size, b))
        cursor = max(cursor, b.address + b.size)
    end = max(seg.address + seg.size, cursor)
    if end > cursor:
        pieces.append((end - cursor, None))
    total = end - seg.address
    widths = _widths([p[0] for p in pieces], total, min_fraction)
    x = 0.0
    for (size, b), w in zip(pieces, widths):
        if b is not None:
            category, color, hatch = block_style(b)
            out.append(
                {
                    "segment": row,
                    "segment_address": seg.address,
                    "segment_size": seg.size,
                    "address": b.address,
                    "size": b.size,
                    "offset": b.address - seg.address,
                    "requested": b.requested,
                    "x": x,
                    "width": w,
                    "widened": total > 0 and w > size / total * (1 + 1e-9),
                    "category": category,
                    "color": color,
                    "hatch": hatch,
                    "node": b.node if category != "free" else None,
                    "output": b.output if category == "output" else None,
                    "label": "free" if category == "free" else (b.owner or "allocated"),
                }
            )
        x += w
    return out


def pool_totals(snapshot: Optional["Snapshot"]) -> dict[str, int]:
    """reserved (all segments), allocated (allocated blocks), live (blocks of live outputs).

    ``live`` counts the allocated blocks owned by a node output that the snapshot lists as
    live (or does not list at all: a trace that names owners but not nodes).
    """
    if snapshot is None:
        return {"reserved": 0, "allocated": 0, "live": 0, "segments": 0, "blocks": 0}
    live_set = {(n.id, o.index) for n in snapshot.nodes for o in n.outputs if o.state == "live"}
    known = {(n.id, o.index) for n in snapshot.nodes for o in n.outputs}
    live = 0
    for seg in snapshot.segments:
        for b in seg.blocks:
            if b.allocated and b.node is not None and b.output is not None:
                key = (b.node, b.output)
                if key in live_set or key not in known:
                    live += b.size
    return {
        "reserved": snapshot.reserved_bytes,
        "allocated": snapshot.allocated_bytes,
        "live": live,
        "segments": len(snapshot.segments),
        "blocks": sum(len(s.blocks) for s in snapshot.segments),
    }


def pool_title(snapshot: Optional["Snapshot"]) -> str:
    """'Pool: 2.0 MiB reserved · 1.5 KiB allocated · 1.0 KiB in live outputs'."""
    return pool_title_of(pool_totals(snapshot))


def pool_subtitle(totals: dict[str, int]) -> str:
    """'1 segment, 4 blocks · each bar is one segment at its own scale'."""
    segs, nblocks = totals["segments"], totals["blocks"]
    return (f"{segs} segment{'s' * (segs != 1)}, {nblocks} block{'s' * (nblocks != 1)}"
            " · each bar is one segment at its own scale")


#: Said under a pool whose small blocks were drawn wider than their share.
WIDENED_NOTE = (f"Blocks under {MIN_BLOCK_FRACTION:.0%} of their segment are drawn {MIN_BLOCK_FRACTION:.0%} wide"
                " so they stay visible; the sizes written are the true ones.")


def pool_title_of(totals: dict[str, int]) -> str:
    return (
        f"Pool: {format_bytes(totals['reserved'])} reserved · {format_bytes(totals['allocated'])} allocated"
        f" · {format_bytes(totals['live'])} in live outputs"
    )


def block_labels(d: dict) -> list[str]:
    """Texts for a block, longest first; the figure writes the longest that fits."""
    cat = d["category"]
    size = format_bytes(d["size"])
    if cat == "output":
        n, o = d["node"], d["output"]
        return [f"node {n} · out {o} · {size}", f"node {n} · out {o}", f"n{n}·o{o}", f"n{n}\no{o}", f"{n}"]
    if cat == "input":
        m = _OWNER_INPUT.search(d["label"] or "")
        i = m.group(1) if m else "?"
        n = d["node"]
        return [f"node {n} · input {i} buffer · {size}", f"node {n} · input {i} buffer", f"n{n}·in{i}",
                f"n{n}\nin{i}", f"{n}"]
    if cat == "unowned":
        return [f"no live output · {size}", "no live output", size]
    return [f"free {size}", "free"]


def segment_label(seg_address: int, kind: str, size: int, used: int, compact: bool) -> str:
    if compact:  # many segments: short, one line (most of the cost of drawing is text)
        return f"{seg_address:#x} {format_bytes(size)}"
    return f"{seg_address:#x} {shown(kind)}\n{format_bytes(size)}, {format_bytes(used)} used"

