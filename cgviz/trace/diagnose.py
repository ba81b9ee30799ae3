"""Diagnose a trace: what went wrong in a run, where, and the change that fixes it.

Pure functions over a Trace (cgviz's own trees and observed torch.compile runs alike, and plain
CUDA graphs: diagnose_graphs.py): every finding rests on steps of the trace (their indices, so a
viewer can jump there) and on numbers counted from them, never on a guess. The reasons the
producers recorded are grouped, not reworded: they already say what the tree decided and why.

This module runs the findings of each area (diagnose_calls.py, diagnose_compile.py,
diagnose_outputs.py, diagnose_costs.py, diagnose_graphs.py) in order, and is where callers import
the doctor's names from: the types of findings.py and the reason readers of reasons.py.
"""

from __future__ import annotations

from typing import Any

from cgviz.trace.diagnose_calls import coverage, eager_fallbacks, pending_backward, raised_errors, rerecords
from cgviz.trace.diagnose_compile import (
    before_observing, compile_skips, graph_breaks, graphs_told_apart, partitions, shapes,
)
from cgviz.trace.diagnose_costs import pool_usage, replay_times
from cgviz.trace.diagnose_graphs import graph_findings
from cgviz.trace.diagnose_outputs import overwritten_outputs
from cgviz.trace.findings import SEVERITIES, Diagnosis, Finding, finding_record
from cgviz.trace.model import Trace
from cgviz.trace.reasons import (
    BEFORE_OBSERVING, GRAPH_BREAK, OBSERVE_FIRST_CALL, PARTITIONED, SILENT, SKIPPED, fix_for, graph_name,
    stack_frames, torch_skip, user_source,
)

__all__ = [
    "BEFORE_OBSERVING", "GRAPH_BREAK", "OBSERVE_FIRST_CALL", "PARTITIONED", "SEVERITIES", "SILENT", "SKIPPED",
    "Diagnosis", "Finding", "diagnose", "diagnose_any", "finding_record", "fix_for", "graph_name", "stack_frames",
    "torch_skip", "user_source",
]


def diagnose(trace: Trace) -> Diagnosis:
    """Every finding of `trace`, the most severe first ('nothing was graphed' always first)."""
    if isinstance(trace.meta.get("ranks"), list):  # a merged multi-rank trace (cgviz.merge): per rank, and divergence
        from cgviz.trace.ranks import diagnose_merged  # ranks.py calls diagnose() per rank

        return diagnose_merged(trace)
    steps = graphs_told_apart(trace.steps)
    times = trace.repeats()
    eager, again, waiting = eager_fallbacks(steps, times), rerecords(steps), pending_backward(steps)
    findings: list[Finding] = []
    findings += coverage(steps, times, trace.meta, eager, again, waiting)
    findings += eager
    findings += again
    findings += overwritten_outputs(steps, trace.meta)
    findings += raised_errors(steps)
    findings += graph_breaks(steps)
    findings += compile_skips(steps)
    findings += partitions(steps)
    findings += waiting
    findings += shapes(trace, steps)
    findings += before_observing(steps, trace.meta)
    findings += pool_usage(trace)
    findings += replay_times(steps, trace.meta)
    findings += graph_findings(trace)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (f.kind != "graphed", order[f.severity]))
    return Diagnosis(findings, len(trace.graphs))


def diagnose_any(source: Any) -> Diagnosis:
    """Diagnose a Trace, or anything with a `.trace` (a Tree)."""
    trace = getattr(source, "trace", source)
    if not isinstance(trace, Trace):
        raise TypeError(f"diagnose() needs a cgviz Trace or Tree, not {type(source).__name__}")
    return diagnose(trace)
