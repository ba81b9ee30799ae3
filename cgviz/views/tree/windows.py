"""The widget's trees, a window of steps at a time, the way the HTML export stores them.

The export (`frames.TreeStates`) sees every step before it draws: each tree structure is
drawn once, with every box as large as any step makes it, and each step is a delta of node
looks. A widget cannot wait for that: its kernel sends the steps around the one shown, then
more as the user moves. So here each structure is drawn when a window first needs it, with
the boxes as large as the steps seen so far make them, and drawn again (a new drawing) only
when a later step needs a larger box; each window of consecutive steps is sent as the whole
state of its first step and the deltas of the others. The front end then steps through what
has arrived by applying deltas to one drawing, as the page does, instead of swapping a whole
1,000-node picture per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from cgviz.views.tree.card import LINE_BADGE, PAD_X, SIZE_META, card, card_size, text_width, widest_badge
from cgviz.views.tree.frames import DrawCache, Frame, Structure, TreeStates, draw_structure, frame_delta

if TYPE_CHECKING:
    from cgviz.trace.model import Step

__all__ = ["TreeWindows"]

_BADGE_WIDTH = widest_badge()  # room for any badge a later step gives a box


class TreeWindows:
    """Builds the tree part of a widget's pieces (`piece`), remembering what was sent.

    `svg_index` stores a drawing (its lines) and returns its index among the payload's trees."""

    def __init__(self, svg_index: Callable[[list[str]], int]) -> None:
        self._states = TreeStates(svg_index)
        self._svg_index = svg_index
        # per structure index: (index into `structs` of its latest drawing, its box sizes per node)
        self._drawn: dict[int, tuple[int, dict[int, list[float]]]] = {}
        self.structs: list[list] = []  # per drawing: [tree index, -1, the state it is drawn in]
        self._sent_structs = 0
        self._sent_looks = 0
        self._memo: dict[tuple, Any] = {}
        self._cache = DrawCache()  # the last drawing's groups, for the next one
        self._bare: dict[int, float] = {}  # per static node: its box's height with no badge

    def piece(self, steps: list["Step"], wanted: Iterable[int]) -> tuple[dict[int, int], dict]:
        """For the step indices `wanted`: the drawing each is shown with (-1: no tree), and the
        piece's ``tree``: new ``structs`` and ``looks``, and per step either its whole state
        (``keys``: the first step of each run of consecutive indices) or its ``delta`` against
        the step before, as `TreeStates.data` words them."""
        drawing: dict[int, int] = {}
        keys: dict[str, list[int]] = {}
        delta: dict[str, list[int]] = {}
        before: Optional[Frame] = None
        last = -2
        for i in sorted(set(wanted)):
            frame, new = self._frame(steps[i])
            run_starts = i != last + 1
            if run_starts:  # a new run: its first step's whole state
                keys[str(i)] = frame.flat() if frame is not None else []
            else:
                delta[str(i)] = [] if frame is None or frame is before else frame_delta(before, frame)
            if run_starts or frame is not None:
                before = frame
            drawing[i] = -1 if frame is None else self._drawing(frame, new)
            last = i
        looks = self._states.looks
        out = {"structs": self.structs[self._sent_structs:], "looks": looks[self._sent_looks:],
               "keys": keys, "delta": delta}
        self._sent_structs, self._sent_looks = len(self.structs), len(looks)
        return drawing, out

    def _frame(self, step: "Step") -> tuple[Optional[Frame], bool]:
        """The tree after `step` (None: no snapshot), and whether it was built just now."""
        if step.snapshot is None:
            return None, False
        return self._states.frame(step.snapshot, step)

    def _drawing(self, frame: Frame, new: bool) -> int:
        """The drawing of `frame`'s structure whose boxes hold every look seen so far: the one
        made before, unless `frame` is new and made a box of it grow since. (A frame seen
        before was checked then, and drawings only grow.)"""
        structure = frame.structure
        got = self._drawn.get(structure.index)
        if got is not None and (not new or _fits(self._states.sizes, got[1])):
            return got[0]
        roomy = self._roomy(structure)
        lines = draw_structure(structure, frame, self._states.looks, roomy, self._memo, self._cache, lines=True)
        self.structs.append([self._svg_index(lines), -1, frame.flat()])
        index = len(self.structs) - 1
        self._drawn[structure.index] = (index, roomy)
        return index

    def _roomy(self, structure: Structure) -> dict[int, list[float]]:
        """Box sizes to draw `structure` with: what the steps seen need, and room for what the
        coming steps commonly add (a badge or two, a replay count ten times larger), so that
        stepping on rarely needs a new drawing."""
        seen = self._states.sizes
        snap = structure.snapshot
        out: dict[int, list[float]] = {}
        for k, n in zip(structure.statics, snap.nodes):
            w, h, low = seen[k]
            bare = self._bare.get(k)
            if bare is None:  # the box with no badge: as short as the node's box gets
                box = card(snap, n, None, None, set(), set())
                bare = self._bare[k] = card_size(box)[1] - LINE_BADGE * len(box.badges)
            replays = f"gen {n.generation} · {max(10 * n.replays, 99)} replays"
            room = max(_BADGE_WIDTH, text_width(replays, SIZE_META)) + 2 * PAD_X
            out[k] = [max(w, room), max(h, bare + 2 * LINE_BADGE), min(low, bare)]
        return out


def _fits(seen: list[list[float]], drawn: dict[int, list[float]]) -> bool:
    """Whether every box drawn holds the sizes seen since (widths and heights within the
    drawing's, and no box shorter than the drawing's shortest, where its edges start)."""
    for k, (w, h, low) in drawn.items():
        sw, sh, slow = seen[k]
        if sw > w or sh > h or slow < low:
            return False
    return True

