"""cgviz.diagnose on plain CUDA graphs (`Trace.graphs`): graphs never replayed, a line that
captures again for every batch, a pool that grows or keeps replaced graphs alive, padding; on
the shipped serving-runner traces and on traces built here step by step. Graphs of
torch.compile's trees are never flagged, and a trace without graphs keeps its findings."""

from __future__ import annotations

import statistics
from typing import Optional

import pytest

import cgviz
from cgviz.data import GPU_DIR, SURPRISES_DIR, TORCH_DIR, graph_trace, gpu_trace, torch_trace
from cgviz.trace.diagnose_graphs import graph_findings
from cgviz.trace.io import load_trace
from cgviz.trace.model import GraphView, Step, Trace
from cgviz.trace.units import format_us

MiB = 2**20
SITE = "serve.py:12 in capture (with torch.cuda.graph(g, pool=pool):)"
GRAPH_KINDS = {"recapture", "graph_pool", "never_replayed", "padding"}


def graph(gid: int, batch: Optional[int] = None, *, replays: int = 0, used: int = 0, padded: int = 0,
          pool_bytes: Optional[int] = None, memory: int = 0, site: str = SITE, capture_ms: float = 0.5,
          origin: str = "torch.cuda.graph", node: Optional[int] = None) -> GraphView:
    """A graph of pool 1 as `cgviz.observe_graphs` would describe it at the end of a trace."""
    return GraphView(id=gid, site=site, origin=origin, device="cuda:0", stream=1, pool=1, memory=memory,
                     pool_bytes=pool_bytes, batch=batch, node=node, replays=replays, used=used, padded=padded,
                     capture_ms=capture_ms)


def trace_of(graphs: list[GraphView], events: list[tuple[str, int]]) -> Trace:
    """A trace whose steps are `events` in order: ("capture" | "replay" | "destroy", graph id)."""
    steps = [Step(index=i, kind=kind, reason=f"{kind} of graph {gid}", generation=1, function=f"graph {gid}",
                  graph=gid) for i, (kind, gid) in enumerate(events)]
    return Trace(steps=steps, meta={"backend": "torch.cuda.graphs"}, graphs=graphs)


def capture_step(trace: Trace, gid: int) -> int:
    return next(s.index for s in trace.steps if s.kind == "capture" and s.graph == gid)


def kinds(diagnosis) -> list[str]:
    return [f.kind for f in diagnosis]


def runner_site(trace: Trace) -> tuple[str, int]:
    """The runner's capture line, as its trace names it ("examples/serving_runner.py:70 in capture (...)"), and
    its line number."""
    (site,) = {g.site for g in trace.graphs}
    assert site.startswith("examples/serving_runner.py:") and " in capture (with torch.cuda.graph(" in site
    return site, int(site.split(":")[1].split(" ")[0])


# -- the shipped traces of examples/serving_runner.py ---------------------------------------------


def test_serving_runner_flags_the_batch_64_graph_it_never_replayed_and_nothing_recaptured():
    trace = graph_trace("serving_runner")
    site, line = runner_site(trace)
    diagnosis = cgviz.diagnose(trace)
    assert not diagnosis.of("recapture") and not diagnosis.of("graph_pool")
    (unused,) = diagnosis.of("never_replayed")
    (idle,) = [g for g in trace.graphs if g.replays == 0]
    assert idle.batch == 64 and idle.memory == 36 * MiB
    assert unused.severity == "warning" and unused.numbers["graphs"] == [idle.id]
    assert unused.evidence == [capture_step(trace, idle.id)]
    assert unused.title.startswith(f"graph {idle.id} (batch 64), captured for batch size 64 at {site}, was never "
                                   "replayed")
    assert "the device reserved 36.0 MiB more during its capture, into pool 1 (shared by 7 graphs" in unused.title
    assert "reset()" in unused.suggestion and "torch.cuda.empty_cache()" in unused.suggestion
    record = diagnosis.to_dict()["findings"][[f.kind for f in diagnosis].index("never_replayed")]
    assert record["source"]["file"] == "examples/serving_runner.py" and record["source"]["line"] == line


def test_serving_runner_padding_is_a_note_with_its_share_and_sizes():
    trace = graph_trace("serving_runner")
    (padding,) = cgviz.diagnose(trace).of("padding")
    used, padded = sum(g.used for g in trace.graphs), sum(g.padded for g in trace.graphs)
    share = 1 - used / padded
    assert share < 0.5 and padding.severity == "info" and not padding.suggestion
    assert f"{100 * share:.0f}% of the rows replayed" in padding.title
    assert f"{padded - used} of {padded} rows" in padding.title
    assert "(batch sizes 1, 2, 4, 8, 16, 32, 64)" in padding.title
    most = max(trace.graphs, key=lambda g: g.padded - g.used)
    assert padding.evidence[0] == capture_step(trace, most.id)


def test_recapture_trace_is_an_error_at_the_runners_capture_line():
    trace = graph_trace("serving_runner-recapture")
    site, line = runner_site(trace)
    diagnosis = cgviz.diagnose(trace)
    (error,) = diagnosis.of("recapture")
    assert diagnosis.findings[0] is error and error.severity == "error"
    seen, again = set(), []
    for g in trace.graphs:  # captured in id order
        if g.batch in seen:
            again.append(g.id)
        seen.add(g.batch)
    replays = sum(g.replays for g in trace.graphs)
    assert len(trace.graphs) >= replays and len(again) >= 2
    assert error.numbers["captures"] == len(trace.graphs) and error.numbers["replays"] == replays
    assert error.numbers["graphs"] == again
    assert error.evidence == [capture_step(trace, gid) for gid in again][:20]
    assert error.title.startswith(f"{site} captured a CUDA graph again and again")
    median = statistics.median(g.capture_ms for g in trace.graphs)
    assert f"{len(trace.graphs)} captures and {replays} replays in all, {len(again)} of them for a batch size" \
        in error.title
    assert f"({format_us(median * 1e3)} median on the host" in error.title
    assert "keyed by the padded size" in error.suggestion
    assert error.numbers["source"]["line"] == line


def test_recapture_trace_names_only_the_graphs_no_later_capture_replaced_as_never_replayed():
    trace = graph_trace("serving_runner-recapture")
    (unused,) = cgviz.diagnose(trace).of("never_replayed")
    expected = [g.id for g in trace.graphs if g.replays == 0
                and not any(later.batch == g.batch and later.id > g.id for later in trace.graphs)]
    assert unused.numbers["graphs"] == expected
    assert [trace.graph(gid).batch for gid in expected] == [64, 1]


def test_recapture_trace_keeps_the_graphs_it_replaced_alive_in_its_pool():
    trace = graph_trace("serving_runner-recapture")
    (pool,) = cgviz.diagnose(trace).of("graph_pool")
    replaced = {g.id for g in trace.graphs if any(later.batch == g.batch and later.id > g.id for later in trace.graphs)}
    last_capture = max(s.index for s in trace.steps if s.kind == "capture")
    assert all(s.index > last_capture for s in trace.steps if s.kind == "destroy")  # the runner kept them all
    assert sorted(pool.numbers["kept_alive"]) == sorted(replaced)
    sizes = [g.pool_bytes for g in trace.graphs]
    assert pool.numbers["from_bytes"] == sizes[0] and pool.numbers["to_bytes"] == max(sizes) > sizes[0]
    assert f"{len(replaced)} graphs stayed alive after a new capture" in pool.title
    assert pool.suggestion.startswith("release a graph you replace")


# -- traces built here ----------------------------------------------------------------------------


def test_several_unused_graphs_of_one_line_are_one_finding_with_their_memory():
    graphs = [graph(1, 16, memory=8 * MiB, pool_bytes=8 * MiB), graph(2, 8, replays=3),
              graph(3, 4, memory=2 * MiB, pool_bytes=10 * MiB)]
    trace = trace_of(graphs, [("capture", 1), ("capture", 2), ("capture", 3)] + [("replay", 2)] * 3)
    (unused,) = graph_findings(trace)[:1]
    assert unused.kind == "never_replayed" and unused.numbers["graphs"] == [1, 3]
    assert unused.evidence == [0, 2] and unused.numbers["memory"] == 10 * MiB
    assert unused.title.startswith(f"2 graphs captured for batch sizes 16, 4 at {SITE} were never replayed")
    assert "the device reserved 10.0 MiB more during their captures" in unused.title


def test_a_pool_growing_over_three_captures_is_a_warning_with_its_sizes():
    sizes = [10, 20, 30, 40]  # MiB after each capture; the caller said no batch size
    graphs = [graph(i + 1, replays=5, pool_bytes=mib * MiB) for i, mib in enumerate(sizes)]
    events = [e for i in range(1, 5) for e in [("capture", i)] + [("replay", i)] * 5]
    trace = trace_of(graphs, events)
    (pool,) = cgviz.diagnose(trace).of("graph_pool")
    assert pool.severity == "warning"
    assert pool.title == "pool 1 grew from 10.0 MiB after its first capture to 40.0 MiB over 4 captures into it " \
                         "(larger after 3 of them)"
    assert pool.numbers["from_bytes"] == 10 * MiB and pool.numbers["to_bytes"] == 40 * MiB
    assert pool.evidence == [capture_step(trace, gid) for gid in (2, 3, 4)]
    assert "reset()" in pool.suggestion and "torch.cuda.empty_cache()" in pool.suggestion


def test_a_pool_captured_smallest_first_is_told_to_capture_the_largest_first():
    graphs = [graph(i + 1, size, replays=2, pool_bytes=(i + 1) * MiB) for i, size in enumerate([1, 2, 4, 8])]
    trace = trace_of(graphs, [("capture", i) for i in range(1, 5)] + [("replay", i) for i in range(1, 5)] * 2)
    (pool,) = cgviz.diagnose(trace).of("graph_pool")
    assert pool.suggestion.startswith("capture the largest batch size first")


def test_a_pool_growing_at_two_captures_only_is_no_finding():
    graphs = [graph(i + 1, replays=5, pool_bytes=mib * MiB) for i, mib in enumerate([10, 20, 30, 30])]
    trace = trace_of(graphs, [("capture", i) for i in range(1, 5)] + [("replay", i) for i in range(1, 5)] * 5)
    assert not cgviz.diagnose(trace).of("graph_pool")


def test_replaced_graphs_kept_alive_are_a_pool_warning():
    graphs = [graph(1, 8, replays=2), graph(2, 8, replays=2), graph(3, 8, replays=2)]
    events = [("capture", 1), ("replay", 1), ("replay", 1), ("capture", 2), ("replay", 2), ("replay", 2),
              ("capture", 3), ("replay", 3), ("replay", 3), ("destroy", 1), ("destroy", 2), ("destroy", 3)]
    trace = trace_of(graphs, events)
    diagnosis = cgviz.diagnose(trace)
    assert not diagnosis.of("recapture")  # 6 replays of 3 graphs: not captured again for each batch
    (pool,) = diagnosis.of("graph_pool")
    assert pool.severity == "warning" and pool.numbers["kept_alive"] == [1, 2]
    assert pool.evidence == [3, 6]  # the captures of their replacements
    assert pool.title.startswith("pool 1: 2 graphs stayed alive after a new capture at the same line for the same "
                                 "batch size replaced them (graph 1, graph 2;")
    assert pool.suggestion.startswith("release a graph you replace")


def test_replaced_graphs_destroyed_at_their_replacement_are_no_finding():
    graphs = [graph(1, 8, replays=2), graph(2, 8, replays=2), graph(3, 8, replays=2)]
    events = [("capture", 1), ("replay", 1), ("replay", 1), ("capture", 2), ("destroy", 1), ("replay", 2),
              ("replay", 2), ("capture", 3), ("destroy", 2), ("replay", 3), ("replay", 3)]
    assert not cgviz.diagnose(trace_of(graphs, events)).of("graph_pool")


def test_capturing_for_every_batch_without_batch_sizes_is_a_recapture_error():
    graphs = [graph(i, replays=1, capture_ms=ms) for i, ms in zip(range(1, 5), (2.0, 1.0, 3.0, 4.0))]
    trace = trace_of(graphs, [e for i in range(1, 5) for e in (("capture", i), ("replay", i))])
    (error,) = cgviz.diagnose(trace).of("recapture")
    assert error.numbers["graphs"] == [2, 3, 4] and error.evidence == [2, 4, 6]
    assert "3 of them after its graphs had begun replaying" in error.title
    assert "(2.5 ms median on the host, 10 ms in all)" in error.title  # median of 1, 2, 3, 4 ms; their sum


def test_padding_above_half_is_a_warning_that_suggests_sizes_in_between():
    graphs = [graph(1, 32, replays=4, used=40, padded=128), graph(2, 8, replays=4, used=20, padded=32)]
    trace = trace_of(graphs, [("capture", 1), ("capture", 2)] + [("replay", 1), ("replay", 2)] * 4)
    (padding,) = cgviz.diagnose(trace).of("padding")
    share = 1 - (40 + 20) / (128 + 32)  # 62.5 %
    assert padding.severity == "warning" and padding.numbers["padding"] == pytest.approx(share)
    assert padding.title.startswith(f"62% of the rows replayed by the graphs captured at {SITE} (batch sizes 8, 32)"
                                    " were padding: 100 of 160 rows")
    assert padding.evidence == [0, 1]  # graph 1 pads 88 rows, graph 2 12
    assert "more batch sizes in between" in padding.suggestion
    assert "replays the exact kernels and addresses it captured" in padding.suggestion


def test_padding_below_half_is_an_info_without_a_fix():
    graphs = [graph(1, 8, replays=4, used=24, padded=32)]
    trace = trace_of(graphs, [("capture", 1)] + [("replay", 1)] * 4)
    (padding,) = cgviz.diagnose(trace).of("padding")
    assert padding.severity == "info" and not padding.suggestion
    assert padding.title.startswith("25% of the rows replayed") and "8 of 32 rows" in padding.title


def test_no_padding_said_is_no_finding():
    trace = trace_of([graph(1, 8, replays=2)], [("capture", 1), ("replay", 1), ("replay", 1)])
    assert graph_findings(trace) == []


@pytest.mark.parametrize("owned", [{"node": 3}, {"origin": "torch.compile"}])
def test_a_tree_graph_never_replayed_is_the_trees_business(owned):
    trace = trace_of([graph(1, 64, memory=8 * MiB, pool_bytes=8 * MiB, **owned)], [("capture", 1)])
    assert graph_findings(trace) == []
    assert not GRAPH_KINDS & set(kinds(cgviz.diagnose(trace)))


def test_a_graph_captured_before_observing_is_not_a_capture_of_this_trace():
    adopted = graph(1, replays=1, site="captured before observing began")
    trace = trace_of([adopted, graph(2, replays=1, site="captured before observing began"),
                      graph(3, replays=1, site="captured before observing began")],
                     [("replay", 1), ("replay", 2), ("replay", 3)])
    assert graph_findings(trace) == []


# -- traces without graphs keep their findings ----------------------------------------------------


WITHOUT_GRAPHS = sorted(p for folder in (GPU_DIR, TORCH_DIR, SURPRISES_DIR) for p in folder.glob("*.cgtrace.json"))


@pytest.mark.parametrize("path", WITHOUT_GRAPHS, ids=lambda p: p.name)
def test_traces_without_graphs_get_no_graph_findings(path):
    trace = load_trace(path)
    assert not trace.graphs and graph_findings(trace) == []
    assert not GRAPH_KINDS & set(kinds(cgviz.diagnose(trace)))


def test_a_trace_without_graphs_gets_the_findings_it_got_before():
    """Severity, kind and first evidence step, as the doctor gave them before it knew plain graphs."""
    expected = {
        "dynamic_shapes": [("error", "graphed", 0), ("warning", "eager", 11), ("warning", "rerecord", 6),
                           ("info", "shapes", 6), ("info", "pool", 0)],
        "generations": [("error", "overwritten", 10), ("info", "coverage", 1), ("info", "pool", 1),
                        ("info", "time", 7), ("info", "time", 8)],
    }
    for name, findings in expected.items():
        assert [(f.severity, f.kind, f.evidence[0]) for f in cgviz.diagnose(gpu_trace(name))] == findings
    assert [(f.severity, f.kind) for f in cgviz.diagnose(torch_trace("torch_dynamic_shapes"))] == [
        ("warning", "rerecord"), ("warning", "shapes"), ("info", "coverage"), ("info", "pool")]
