"""cgviz.observe_graphs where no GPU is needed: the torch names it calls in each release, the
way it takes (global hooks or CUDAGraph's methods), what it puts back, the caller's batch
context, its arguments, traces with graphs on disk (and hostile ones), the groups views read."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import cgviz
from cgviz.observe import _graph_hooks
from cgviz.observe import _torch_layout as layout
from cgviz.observe.graph_batch import current, graph_batch
from cgviz.trace.graph_groups import families, own_graphs, pools
from cgviz.trace.io import TraceFormatError, dumps, loads
from cgviz.trace.model import GraphView, Step, Trace
from helpers import ROOT
from torch_surface import RELEASES, compare_release, load_surface

GRAPHS = "torch/cuda/graphs.py"
TORCH_SRC = Path(os.environ.get("CGVIZ_TORCH_SRC", ROOT.parent / "shared" / "torch-src"))
HOOKS_SINCE = layout.SINCE["graphs.register_graph_instantiate_hook"]


# -- the names cgviz calls, in every recorded release -------------------------------------------------
@pytest.mark.parametrize("release", RELEASES)
def test_each_release_offers_the_way_cgviz_takes(release):
    """From 2.14, the four global hooks, each taking one callable; before, none of them, and
    CUDAGraph's own Python methods are wrapped instead (they are there in every release)."""
    surface = load_surface(release)
    has_hooks = compare_release(release, HOOKS_SINCE) >= 0
    for name in _graph_hooks.HOOK_FUNCTIONS.values():
        assert surface.has_function(GRAPHS, name) is has_hooks, (release, name)
        if has_hooks:
            assert list(surface.function_signature(GRAPHS, name).parameters) == ["fn"]
    for method in _graph_hooks.WRAPPED_METHODS + (_graph_hooks.RESET_METHOD, "pool"):
        assert surface.has_member("CUDAGraph", method, GRAPHS), (release, method)
    assert list(surface.signature("CUDAGraph", "replay", GRAPHS).parameters) == ["self"]
    assert list(surface.signature("CUDAGraph", "reset", GRAPHS).parameters) == ["self"]
    assert list(surface.signature("CUDAGraph", "capture_end", GRAPHS).parameters) == ["self"]


def _method_body(release: str, name: str) -> ast.FunctionDef:
    path = TORCH_SRC / release / GRAPHS
    if not path.exists():
        pytest.skip(f"torch {release}'s sources are not at hand")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CUDAGraph")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _calls(fn: ast.FunctionDef) -> list[str]:
    """The calls in a method, in source order, as text ('_run_global_hooks(...)', 'self.instantiate()')."""
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
    return [ast.unparse(c.func) + ("(" + ", ".join(ast.unparse(a) for a in c.args) + ")")
            for c in sorted(calls, key=lambda c: (c.lineno, c.col_offset))]


@pytest.mark.parametrize("release", [r for r in RELEASES if compare_release(r, HOOKS_SINCE) >= 0])
def test_hooked_torch_hands_the_capture_end_hook_a_live_graph_and_balances_replays(release):
    """What the hook route relies on, in torch's own source: the capture-end hooks run before
    the graph is instantiated (its cudaGraph_t still live, so its kernels can be read), the
    capture-start hooks after capture began, and a replay's end hooks in a `finally`."""
    end = _calls(_method_body(release, "capture_end"))
    hook = end.index("_run_global_hooks(_global_capture_end_hooks, self)")
    assert hook < end.index("self.instantiate()")
    begin = _calls(_method_body(release, "capture_begin"))
    assert begin.index("_run_global_hooks(_global_capture_start_hooks, self)") > begin.index(
        next(c for c in begin if c.startswith("super().capture_begin")))
    replay = _method_body(release, "replay")
    tries = [n for n in ast.walk(replay) if isinstance(n, ast.Try)]
    assert any("_global_replay_end_hooks" in ast.unparse(t.finalbody) for t in tries)
    assert "_global_replay_start_hooks" in ast.unparse(replay)


def test_route_follows_the_installed_torch():
    expected = "hooks" if compare_release(str(torch.__version__), HOOKS_SINCE) >= 0 else "methods"
    assert _graph_hooks.route() == expected


def test_observing_puts_back_what_it_wrapped_or_registered():
    cls = torch.cuda.CUDAGraph
    before = {name: cls.__dict__[name] for name in _graph_hooks.WRAPPED_METHODS + (_graph_hooks.RESET_METHOD,)}
    with cgviz.observe_graphs() as trace:
        wrapped = {n for n in before if cls.__dict__[n] is not before[n]}
        assert wrapped == set(before) if trace.meta["graph_events_from"] == "methods" else wrapped == {"reset"}
        with cgviz.observe_graphs(trace="events"):  # nested: the wrapping is made once
            assert len(_graph_hooks.ACTIVE) == 2
    assert {name: cls.__dict__[name] for name in before} == before
    assert not _graph_hooks.ACTIVE and not _graph_hooks._HANDLES and not _graph_hooks._ORIGINALS


def test_a_block_that_raises_still_stops_observing():
    with pytest.raises(KeyError, match="the user's"):
        with cgviz.observe_graphs():
            raise KeyError("the user's")
    assert not _graph_hooks.ACTIVE and not _graph_hooks._ORIGINALS


def test_import_cgviz_stays_light():
    code = "import sys, cgviz; cgviz.graph_batch; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- arguments -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error, words", [
    ({"trace": "all"}, ValueError, "trace must be 'events' or 'full'"),
    ({"kernels": "yes"}, TypeError, "kernels must be True, False or None"),
    ({"timed": 1}, TypeError, "timed must be True or False"),
])
def test_bad_arguments_are_named(kwargs, error, words):
    with pytest.raises(error, match=words):
        with cgviz.observe_graphs(**kwargs):
            pass
    assert not _graph_hooks.ACTIVE


def test_observe_torch_graphs_must_be_a_bool():
    with pytest.raises(TypeError, match="graphs must be True or False"):
        with cgviz.observe_torch(graphs="yes"):
            pass


def test_observe_torch_with_graphs_shares_one_trace():
    with cgviz.observe_torch(graphs=True) as trace:
        assert len(_graph_hooks.ACTIVE) == 1 and _graph_hooks.ACTIVE[0].trace is trace
    assert trace.meta["backend"] == "torch.compile" and trace.meta["graphs_observed"] is True
    assert not _graph_hooks.ACTIVE


def test_an_unwritable_path_is_refused_before_the_block(tmp_path):
    ran = []
    with pytest.raises(OSError):
        with cgviz.observe_graphs(path=tmp_path / "missing" / "t.cgtrace.json"):
            ran.append(1)
    assert not ran


# -- the caller's batch ------------------------------------------------------------------------------
def test_graph_batch_nests_and_is_per_thread():
    assert current() is None
    with graph_batch(8, label="decode") as outer:
        assert current() == outer == (8, None, "decode")
        with graph_batch(8, used=5):
            assert current().used == 5
            seen = []
            t = threading.Thread(target=lambda: seen.append(current()))
            t.start(), t.join()
            assert seen == [None]
        assert current() is outer
    assert current() is None


@pytest.mark.parametrize("args, kwargs, error", [
    ((0,), {}, ValueError), ((8.0,), {}, ValueError), ((8, 9), {}, ValueError), ((8, -1), {}, ValueError),
    ((True,), {}, ValueError), ((8,), {"label": 3}, TypeError),
])
def test_graph_batch_refuses_what_cannot_be_a_batch(args, kwargs, error):
    with pytest.raises(error, match="graph_batch"):
        with graph_batch(*args, **kwargs):
            pass
    assert current() is None


# -- traces with graphs --------------------------------------------------------------------------------
def _trace() -> Trace:
    a = GraphView(1, "serve.py:40 in capture", "torch.cuda.graph", "cuda:0", 1, 1, memory=2 << 20, batch=8,
                  replays=3, used=20, padded=24, kernels=[["gemm", 2], ["gelu", 1]])
    b = GraphView(2, "serve.py:40 in capture", "torch.cuda.graph", "cuda:0", 1, 1, batch=4, replays=0)
    c = GraphView(3, "train.py:9 in main", "make_graphed_callables", "cuda:0", 2, 2, replays=2)
    d = GraphView(4, "torch.compile's trees", "torch.compile", "cuda:0", 3, 3, node=0)
    steps = [Step(0, "capture", "captured", 1, function=g.name, graph=g.id) for g in (a, b, c)]
    steps.append(Step(3, "replay", "replayed", 1, function=a.name, graph=1, repeat=3))
    return Trace(steps=steps, meta={"backend": "torch.cuda.graphs"}, graphs=[a, b, c, d])


def test_a_trace_with_graphs_round_trips():
    trace = _trace()
    again = loads(dumps(trace))
    assert again.graphs == trace.graphs
    assert [s.graph for s in again.steps] == [1, 2, 3, 1]
    assert again.graph(3).origin == "make_graphed_callables"
    assert '"graphs"' not in dumps(Trace(steps=[Step(0, "record", "r", 1)]))  # none: the file reads as before


@pytest.mark.parametrize("change, words", [
    (lambda d: d["graphs"][1].update(id=1), "graph 1: field 'id' is used by another graph"),
    (lambda d: d["steps"][0].update(graph=9), "step 0: field 'graph' names graph 9"),
    (lambda d: d["graphs"][0].update(kernels=[["gemm", "2"]]), "kernels[0]' must be a [kernel name, count] pair"),
    (lambda d: d["graphs"][0].update(used=30), "counts more rows in use (30) than were replayed (24)"),
    (lambda d: d["graphs"][0].update(replays=-1), "field 'replays' must be a count"),
    (lambda d: d["graphs"][0].update(batch=0), "field 'batch' must be a positive count"),
    (lambda d: d["graphs"][0].update(replay_us=-2.0), "field 'replay_us' must be a duration"),
    (lambda d: d["graphs"][0].update(code="import os"), "graph 0: unknown field 'code'"),
    (lambda d: d.update(graphs={"a": 1}), "field 'graphs' must be an array"),
    (lambda d: d["graphs"][0].pop("site"), "graph 0: missing field 'site'"),
])
def test_a_hostile_graphs_field_is_refused_by_name(change, words):
    data = json.loads(dumps(_trace()))
    change(data)
    with pytest.raises(TraceFormatError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        loads(json.dumps(data))


def test_groups_by_code_and_by_pool():
    trace = _trace()
    assert [g.id for g in own_graphs(trace)] == [1, 2, 3]  # graph 4 is a tree's node
    serve, train = families(trace)
    assert serve.site == "serve.py:40 in capture" and serve.sizes == [4, 8] and serve.replays == 3
    assert serve.padding == pytest.approx(1 - 20 / 24)
    assert train.padding is None and train.memory == 0
    first, second = pools(trace)
    assert (first.pool, first.shared, [g.id for g in first.graphs]) == (1, True, [1, 2])
    assert (second.pool, second.shared) == (2, False)



def test_a_trace_of_well_used_graphs_has_nothing_wrong_to_say():
    g = GraphView(1, "serve.py:40 in capture", "torch.cuda.graph", "cuda:0", 1, 1, replays=50)
    steps = [Step(0, "capture", "captured", 1, function=g.name, graph=1),
             Step(1, "replay", "replayed", 1, function=g.name, graph=1, repeat=50)]
    diagnosis = cgviz.diagnose(Trace(steps=steps, graphs=[g]))
    assert diagnosis.text() == "no findings: nothing looks wrong with the 1 CUDA graph of the trace"
    assert cgviz.diagnose(Trace()).text() == "no findings: nothing was called through a tree"


class _Graph:
    """Stands in for a CUDAGraph where the observer only holds it weakly and watches it die."""


def test_only_the_last_graph_of_a_pool_to_die_says_torch_releases_the_pool():
    """Graphs destroyed together are made into steps afterwards: each says what its own
    destruction did to the pool, as it was then, and counts its replays in words."""
    from cgviz.observe.graph_observer import RELEASED_POOL, GraphObserver

    observer = GraphObserver(trace="events")
    graphs = {gid: _Graph() for gid in (1, 2, 3, 4)}
    for gid, pool in zip(graphs, (1, 1, 1, 2)):
        observer._hold(graphs[gid], GraphView(id=gid, site="model.py:3 in f", origin="torch.cuda.graph",
                                              device="cuda:0", stream=7, pool=pool))
    observer._views[2].replays = 1
    observer._views[3].replays = 2
    for gid in (2, 1, 3, 4):  # all of them die before any step is made
        del graphs[gid]
    observer.catch_up()
    reasons = {s.graph: s.reason for s in observer.trace.steps if s.kind == "destroy"}
    assert reasons[2] == "graph 2 was destroyed after 1 replay; pool 1 stays: other graphs still use it"
    assert reasons[1] == "graph 1 was destroyed after 0 replays; pool 1 stays: other graphs still use it"
    assert reasons[3] == f"graph 3 was destroyed after 2 replays; torch releases pool 1: {RELEASED_POOL}"
    assert reasons[4] == f"graph 4 was destroyed after 0 replays; torch releases pool 2: {RELEASED_POOL}"
    assert [s.graph for s in observer.trace.steps] == [2, 1, 3, 4]


@pytest.mark.parametrize("name", ["serving_runner", "serving_runner-recapture"])
def test_the_shipped_runs_release_their_shared_pool_once_at_the_last_destruction(name):
    """Recorded on the GPU: every graph of the runner shares pool 1, so only the last to die releases it."""
    from cgviz.data import graph_trace

    destroys = [s for s in graph_trace(name).steps if s.kind == "destroy"]
    assert len(destroys) >= 7
    assert all("; pool 1 stays: other graphs still use it" in s.reason for s in destroys[:-1])
    assert "; torch releases pool 1: no other allocation takes its memory" in destroys[-1].reason


def _observer_holding(*pools: int, trace: str = "events", tree=None, graph=None):
    from cgviz.observe.graph_observer import GraphObserver

    observer = GraphObserver(trace=trace, tree=tree)
    graphs = [(graph or _Graph)() for _ in pools]
    for gid, (graph, pool) in enumerate(zip(graphs, pools), start=1):
        observer._hold(graph, GraphView(id=gid, site="model.py:3 in f", origin="torch.cuda.graph",
                                        device="cuda:0", stream=7, pool=pool))
    return observer, graphs


def test_a_capture_says_it_shares_its_pool_with_the_graphs_still_alive_only():
    observer, graphs = _observer_holding(1, 1, 1)
    del graphs[0]  # graph 1 died; graphs 2 and 3 still use pool 1
    reason = observer._capture_reason(observer._views[3])
    assert "into pool 1, shared with graph 2;" in reason, reason
    del graphs[0]
    assert "into pool 1 (its own);" in observer._capture_reason(observer._views[3])


def test_a_destroy_step_starts_when_the_graph_died_not_when_the_step_is_made(monkeypatch):
    from cgviz.observe import graph_observer

    observer, graphs = _observer_holding(1)
    clock = [1000.0]
    monkeypatch.setattr(graph_observer.time, "time", lambda: clock[0])
    del graphs[0]
    clock[0] = 1060.0  # the step is made a minute later
    observer.catch_up()
    (step,) = [s for s in observer.trace.steps if s.kind == "destroy"]
    assert step.start == 1000.0


def test_a_graph_of_the_trees_counts_its_replays_and_makes_no_step():
    """Its replays are torch's own (the record's first replay, each execute): counted on its view."""
    observer, graphs = _observer_holding(1)
    observer._in_tree.add(1)
    assert [observer.replay_began(graphs[0]) for _ in range(3)] == [None] * 3
    assert observer._views[1].replays == 3
    assert observer.trace.steps == []


class _NeverCaptured:
    def pool(self):
        raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")


def test_a_graph_never_captured_is_not_adopted_and_torch_raises_its_own_error():
    from cgviz.observe.graph_observer import GraphObserver

    observer = GraphObserver(trace="events")
    graph = _NeverCaptured()
    assert observer.replay_began(graph) is None
    assert observer._views == {} and observer.trace.graphs == []


class _Resettable(_Graph):
    """A captured graph whose pool torch forgets at reset(), as CUDAGraph.pool() does."""

    captured = True

    def pool(self):
        if not self.captured:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return (0, 1)


def test_a_reset_graph_is_destroyed_at_its_reset_and_not_again_at_its_death():
    """CUDAGraph.reset() frees the graph and lets go of its pool, as its destruction does: the destroy
    step comes at the reset, says so, and the object's later death adds nothing; a replay after it
    is torch's error, not a replay of the graph reset."""
    from cgviz.observe.graph_observer import RELEASED_POOL

    observer, graphs = _observer_holding(1, 1, graph=_Resettable)
    graph = graphs[0]
    observer._views[1].replays = 2
    graph.captured = False
    observer.graph_reset(graph)
    observer.catch_up()
    (step,) = [s for s in observer.trace.steps if s.kind == "destroy"]
    assert step.graph == 1
    assert step.reason == "graph 1 was reset (CUDAGraph.reset()) after 2 replays; pool 1 stays: other graphs still use it"
    assert observer.replay_began(graph) is None and observer._views[1].replays == 2
    del graphs[:]
    observer.catch_up()
    assert [(s.graph, s.reason.split(" after")[0]) for s in observer.trace.steps if s.kind == "destroy"] == [
        (1, "graph 1 was reset (CUDAGraph.reset())"), (2, "graph 2 was destroyed")]
    assert RELEASED_POOL in observer.trace.steps[-1].reason
    del graph
    observer.catch_up()
    assert sum(s.kind == "destroy" for s in observer.trace.steps) == 2


def test_a_graph_of_the_trees_reset_makes_no_step():
    observer, graphs = _observer_holding(1)
    observer._in_tree.add(1)
    observer.graph_reset(graphs[0])
    observer.catch_up()
    assert observer.trace.steps == []


def test_a_replay_made_into_a_step_later_keeps_the_generation_it_happened_in():
    """Replays of graphs 1 and 2 in turn fold; the half-done repetition is made into steps only
    when the next generation's step comes: the replay still says generation 1."""
    from cgviz.observe.observer import TorchObserver

    tree = TorchObserver("events")
    observer, graphs = _observer_holding(1, 1, tree=tree)
    tree.graph_sink = observer
    for gid in (1, 2, 1, 2, 1):
        observer.noted(gid)
    tree._new_generation(None)
    tree.log.flush()
    replays = [s for s in tree.trace.steps if s.kind == "replay"]
    assert [(s.graph, s.generation) for s in replays][-1] == (1, 1)
    assert tree.trace.steps[-1].kind == "generation" and tree.trace.steps[-1].generation == 2


def test_block_error_reads_the_exception_that_ends_a_graph_block():
    """torch.cuda.graph's __exit__(self, *args) ends the capture; the error is its args[1]."""
    from cgviz.observe.graph_observer import block_error

    source = ("import sys\n"
              "class graph:\n"
              "    def __exit__(self, *args):\n"
              "        return end()\n"
              "def end():\n"
              "    return sys._getframe(1)\n")
    space: dict = {}
    exec(compile(source, os.path.join("site-packages", "torch", "cuda", "graphs.py"), "exec"), space)
    error = ValueError("bad batch")
    assert block_error(space["graph"]().__exit__(ValueError, error, None)) is error
    assert block_error(space["graph"]().__exit__(None, None, None)) is None
    assert block_error(sys._getframe()) is None  # no graph block up the stack


class _Captured(_Graph):
    def pool(self):
        return (0, 7)


def test_a_tree_node_recorded_before_observing_is_adopted_as_the_trees(monkeypatch):
    """Its first observed replay comes from the node's run_graph in torch's trees module (here
    a class of that name, compiled under that file's name): its view is the trees', linked to
    the node, and its replays are counted, not made into steps of their own."""
    from cgviz.observe.observer import TorchObserver

    trees_file = layout.TREES_MODULE
    __import__(trees_file)
    source = ("class CUDAGraphNode:\n"
              "    def __init__(self, graph, observer):\n"
              "        self.graph, self.observer = graph, observer\n"
              "    def run_graph(self):\n"
              "        return self.observer.replay_began(self.graph)\n")
    space: dict = {}
    exec(compile(source, sys.modules[trees_file].__file__, "exec"), space)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # the device a view names, on this CPU machine
    tree = TorchObserver("events")
    observer, _ = _observer_holding(tree=tree)
    graph, user_graph = _Captured(), _Captured()
    node = space["CUDAGraphNode"](graph, observer)
    node.run_graph()
    node.run_graph()
    (view,) = observer.trace.graphs
    assert (view.origin, view.node, view.replays) == ("torch.compile", tree.node_id(node), 2)
    assert tree.raw.events == [] and tree.trace.steps == []
    observer.replay_began(user_graph)  # the user's own graph: a plain adopted graph
    assert observer.trace.graphs[-1].origin == "CUDAGraph" and observer.trace.graphs[-1].node is None


class _Stream:
    def __init__(self, device):
        self.device = device


class _Event:
    """As torch.cuda.Event: bound to the device of the stream it first records on."""

    def __init__(self, enable_timing=False):
        self.device = None

    def record(self, stream=None):
        stream = stream or torch.cuda.current_stream()
        if self.device not in (None, stream.device):
            raise RuntimeError("Event device does not match recording stream's device")
        self.device = stream.device

    def query(self):
        return True

    def elapsed_time(self, end):
        return 0.004


def test_timed_replays_are_timed_on_their_graph_s_device(monkeypatch):
    """torch launches a replay on its capture device's current stream, whichever device is
    current: its events record there, and are reused on that device only."""
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream(0 if device is None else device))
    from cgviz.observe.graph_observer import GraphObserver

    observer = GraphObserver(trace="events", timed=True)
    graphs = [_Graph(), _Graph()]
    for gid, graph in enumerate(graphs, start=1):
        observer._hold(graph, GraphView(id=gid, site="model.py:3 in f", origin="torch.cuda.graph",
                                        device=f"cuda:{gid - 1}", stream=7, pool=gid))
    recorded = []
    for _ in range(3):
        for graph in graphs:  # cuda:0 current throughout
            began = observer.replay_began(graph)
            observer.replay_ended(began)
            recorded.append((graph is graphs[1], began[1].device, observer._timing[-1][2].device))
            observer._read_times(wait=False)  # read at once: its events are reused
    assert recorded == [(False, 0, 0), (True, 1, 1)] * 3
    assert {d: len(e) for d, e in observer._free_events.items()} == {0: 2, 1: 2}
    observer.finish()
    assert [v.replay_us for v in observer.trace.graphs] == [4.0, 4.0]
