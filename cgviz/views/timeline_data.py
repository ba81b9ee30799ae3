"""What the timeline draws for a trace's steps, as data: a dict per step, the folded blocks
and the generation boundaries.

`timeline_items` is the single source of truth for the ticks (`timeline_folds` and
`timeline_generations` derive the bands and lines from it): the figure (`cgviz.views.timeline`),
its lanes (`cgviz.views.timeline_lanes`) and its artists (`cgviz.views.timeline_draw`) all
read these dicts, and none of them decides again what a step is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, Union

from cgviz.trace.model import GRAPH_STEP_KINDS

from cgviz.views.style import step_color

if TYPE_CHECKING:
    from cgviz.trace.model import Step, Trace

__all__ = ["timeline_items", "timeline_folds", "timeline_generations", "trace_steps"]

# an item's "lane": the steps of CUDA graphs made outside the trees, or of a tree
LANE_GRAPHS = "graphs"
LANE_TREE = "tree"


def trace_steps(trace: Union["Trace", Sequence["Step"], None]) -> Sequence["Step"]:
    """The steps of a trace, of a list of steps, or of None (none)."""
    if trace is None:
        return []
    return trace.steps if hasattr(trace, "steps") else trace


def timeline_items(trace: Union["Trace", Sequence["Step"], None]) -> list[dict]:
    """One dict per stored step, in order: what the timeline draws for it.

    ``index`` (position in ``trace.steps``, the x coordinate), ``step_index`` (the step's
    own index field), ``kind``, ``color`` (`STEP_COLORS`), ``repeat`` and ``span`` (a
    folded block ends at this step), ``generation``, ``function``, ``node``, ``rank`` (None
    but in a merged multi-rank trace), ``device`` (None but where one process ran trees on
    several devices), ``graph`` (the CUDA graph a capture, replay or destroy step is about, else
    None) and ``lane``: "graphs" for such a step, "tree" for the others.
    """
    return [
        {
            "index": i,
            "step_index": s.index,
            "kind": s.kind,
            "color": step_color(s.kind),
            "repeat": s.repeat,
            "span": s.span,
            "generation": s.generation,
            "function": s.function,
            "node": s.node,
            "rank": s.rank,
            "device": s.device,
            "graph": s.graph,
            "lane": LANE_GRAPHS if s.kind in GRAPH_STEP_KINDS else LANE_TREE,
        }
        for i, s in enumerate(trace_steps(trace))
    ]


def timeline_folds(items: list[dict]) -> list[dict]:
    """The folded blocks: ``start``..``end`` (step positions, inclusive), ``repeat``,
    ``span``, ``generations`` (first, last) the repeats cover, and the ``label`` drawn."""
    folds = []
    for it in items:
        if it["repeat"] <= 1:
            continue
        end = it["index"]
        start = max(0, end - it["span"] + 1)
        inside = items[start : end + 1]
        first = inside[0]["generation"]
        new_gens = sum(1 for x in inside if x["kind"] == "generation")
        last = max(x["generation"] for x in inside) + new_gens * (it["repeat"] - 1)
        label = f"×{it['repeat']}"
        if last != first:
            label += f" · gen {first}–{last}"
        folds.append({"start": start, "end": end, "repeat": it["repeat"], "span": it["span"],
                      "generations": (first, last), "label": label})
    return folds


def timeline_generations(items: list[dict]) -> list[dict]:
    """Generation boundaries: a new generation begins at step ``index`` (the line is drawn
    at ``x`` = index - 0.5), labelled ``label`` = 'gen N'."""
    out = []
    for prev, it in zip(items, items[1:]):
        if it["generation"] != prev["generation"]:
            out.append({"index": it["index"], "x": it["index"] - 0.5, "generation": it["generation"],
                        "label": f"gen {it['generation']}"})
    return out
