"""The words around the timeline's strip: its title, the current step's headline and the legend
of the step kinds, bands and lines drawn (`cgviz.views.timeline_draw`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cgviz.trace.lanes import TreeKey

from cgviz.views.style import STEP_LABELS, step_color
from cgviz.views.text import shown
from cgviz.views.timeline_draw import FOLD_FACE, FOLD_HATCH_COLOR, GEN_LINE
from cgviz.views.timeline_lanes import Lane

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from cgviz.trace.model import Step


def step_headline(step: "Step") -> str:
    """The step's headline as drawn; its kind where it has none to give."""
    try:
        return shown(step.headline())
    except Exception:  # a view never fails on a step it cannot describe
        return step.kind


def timeline_title(items: list[dict], folds: list[dict], ranks: list[Lane]) -> str:
    """'Timeline: 40 steps (130 with repeats) on 2 ranks' (or '2 devices', '4 trees'; the lanes of
    one tree and of CUDA graphs are said by their names alone)."""
    n = len(items)
    times = [1] * n
    for f in folds:
        times[f["start"] : f["end"] + 1] = [f["repeat"]] * (f["end"] - f["start"] + 1)
    calls = sum(times)
    title = f"Timeline: {n} step{'s' * (n != 1)}"
    if calls != n:
        title += f" ({calls} with repeats)"
    trees = [r for r in ranks if isinstance(r, tuple)]
    if len(trees) > 1:
        title += f" on {_trees_in_words(trees)}"
    return title


def _trees_in_words(keys: list[TreeKey]) -> str:
    """'2 ranks', '2 devices', or '4 trees (2 ranks)' where ranks ran trees on several devices."""
    ranks = {k[0] for k in keys if k is not None and k[0] is not None}
    devices = any(k is not None and k[1] is not None for k in keys)
    n = len(keys)
    if not devices:
        return f"{n} rank{'s' * (n != 1)}"
    if not ranks:
        return f"{n} device{'s' * (n != 1)}"
    return f"{n} trees ({len(ranks)} rank{'s' * (len(ranks) != 1)})"


def draw_legend(fig: "Figure", present: list[str], folds: bool, gens: bool, left: float) -> None:
    """The kinds `present`, then the repeated block's band and the generation line where drawn,
    in one row (two, past six entries) at the figure's bottom left."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=step_color(k), edgecolor="none", label=STEP_LABELS.get(k, k)) for k in present]
    if folds:
        handles.append(Patch(facecolor=FOLD_FACE, edgecolor=FOLD_HATCH_COLOR, hatch="////", linewidth=0.6,
                             label="repeated block"))
    if gens:
        handles.append(Line2D([], [], color=GEN_LINE, linewidth=0.9, linestyle=(0, (3, 2)),
                              label="generation boundary"))
    ncol = len(handles) if len(handles) <= 6 else (len(handles) + 1) // 2
    legend = fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(left, 0.02), ncol=ncol,
                        fontsize=7.5, frameon=False, handlelength=1.3, handleheight=0.9, columnspacing=1.2,
                        borderaxespad=0, labelspacing=0.3)
    legend.set_gid("timeline-legend")
