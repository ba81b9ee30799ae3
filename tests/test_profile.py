"""What each node costs and holds: kernels read from CUDA's graph dump, replay and eager times,
and output values (Tree(values=True))."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import cgviz
from cgviz._torch.kernels import graph_nodes, kernel_counts
from cgviz.engine.profile import value_summary
from cgviz.trace.model import Step, Trace
from cgviz.views.page_data import page_data
from cgviz.trace.profile import profile_entries
from cgviz.views.text import kernel_label, time_line, value_text

DOT = Path(__file__).parent / "data" / "cuda_graph_debug.dot"

# torch's profiler on the same function, on the H100 the DOT file was written on
# (relu(x @ w) + 1, then .sum(0): cuBLAS gemm + split-k, clamp, add, reduce)
PROFILER_KERNELS = [
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_split_k_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >"
    "(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)",
]


def test_the_graph_dump_lists_each_kernel_node():
    nodes = graph_nodes(DOT.read_text())
    assert [kind for kind, _ in nodes] == ["KERNEL"] * 5
    assert nodes[0][1] == PROFILER_KERNELS[0] and nodes[1][1] == PROFILER_KERNELS[1]
    assert all(not name.endswith("\\>\\>\\>") and "<<<" not in name for _, name in nodes)


@pytest.mark.skipif(__import__("shutil").which("c++filt") is None, reason="c++filt (binutils) demangles kernel names")
def test_kernel_names_read_as_the_profiler_names_them():
    names = [name for name, _ in kernel_counts(DOT.read_text())]
    for expected in PROFILER_KERNELS:
        assert expected in names
    assert any(n.startswith("void at::native::reduce_kernel<128, 4,") for n in names)
    assert kernel_label(PROFILER_KERNELS[2]) == (
        "vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >")


def test_long_kernel_names_keep_the_ends_that_tell_them_apart():
    plain, split = (kernel_label(name) for name in PROFILER_KERNELS[:2])
    assert len(plain) == len(split) == 90 and plain != split
    assert plain.startswith("sm80_xmma_gemm_f32f32_") and "…" in plain
    assert split.endswith("_split_k_kernel__5x_cublas") and plain.endswith("_execute_kernel__5x_cublas")


def test_a_repeated_kernel_is_counted():
    text = DOT.read_text()
    node4 = text[text.index('"graph_4_node_4"['):text.index('"graph_4_node_0" ->')]
    twice = text.replace('"graph_4_node_0" ->', node4.replace("graph_4_node_4", "graph_4_node_5") + '"graph_4_node_0" ->', 1)
    counts = dict((name, count) for name, count in kernel_counts(twice))
    assert sorted(counts.values()) == [1, 1, 1, 1, 2]
    assert sum(counts.values()) == len(graph_nodes(twice)) == 6


def loop(tree: cgviz.Tree, n: int = 6):
    f = tree.wrap(lambda x: (x * 2, x.sum()), name="f")
    x = torch.arange(6.0)
    kept = []
    for i in range(n):
        a, b = f(x + i)
        kept.append((a.clone(), b.clone()))
        tree.mark_step()
    return f, kept


def test_a_long_loop_times_a_node_s_first_32_replays_then_one_in_64():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x * 2, name="f")
    x = torch.randn(4)
    for _ in range(202):  # warmup, record, 200 replays
        f(x)
    (graph,) = [e for e in tree.trace.meta["profile"].values() if e["kind"] == "graph"]
    assert tree.nodes[-1].replays == 200
    assert graph["replays_timed"] == 32 + len(range(64, 200, 64))


def test_a_profile_times_every_replay_and_the_eager_runs_apart_from_the_first():
    tree = cgviz.Tree("sim")
    loop(tree)
    profile = tree.trace.meta["profile"]
    graphs = [e for e in profile.values() if e["kind"] == "graph"]
    assert len(graphs) == 1
    assert graphs[0]["replays_timed"] == tree.trace.counts()["execute"] == 4
    assert isinstance(graphs[0]["replay_us"], float) and graphs[0]["replay_us"] >= 0 and graphs[0]["clock"].startswith("CPU wall clock")
    assert graphs[0]["eager_is_first_call"] is True  # only the first call ran eagerly
    (entry,) = [e for e in profile_entries(tree.trace.meta) if e.kind == "graph"]
    assert (entry.replay_us, entry.eager_is_first_call, entry.measured) == (graphs[0]["replay_us"], True, False)
    assert "sim, not a GPU" in time_line(entry) and "×" not in time_line(entry)


def test_no_profile_unless_asked_below_full():
    assert "profile" not in cgviz.Tree("sim", trace="events").trace.meta
    tree = cgviz.Tree("sim", trace="events", profile=True)
    loop(tree, 3)
    assert tree.trace.meta["profile"]
    tree = cgviz.Tree("sim", profile=False)
    loop(tree, 3)
    assert "profile" not in tree.trace.meta


def test_values_follow_each_replay_and_an_invalidated_output_keeps_its_last():
    tree = cgviz.Tree("sim", values=True)
    _, kept = loop(tree, 4)
    graph_steps = [s for s in tree.trace.steps if s.kind in ("record", "execute")]
    last = graph_steps[-1].snapshot.node(graph_steps[-1].node).outputs[0]
    a, b = kept[-1]
    assert last.values["head"] == a[:4].tolist() and last.values["max"] == a.max().item()
    assert last.values["mean"] == pytest.approx(a.mean().item()) and last.state == "live"
    after = tree.trace.steps[-1].snapshot.node(graph_steps[-1].node).outputs[0]
    assert tree.trace.steps[-1].kind == "generation" and after.state == "invalid" and after.values == last.values
    record = next(s for s in tree.trace.steps if s.kind == "record").snapshot.node(graph_steps[-1].node).outputs[0]
    assert record.values["head"] == kept[1][0][:4].tolist() != last.values["head"]  # the replay overwrote it


def test_values_and_profile_survive_save_and_load(tmp_path):
    tree = cgviz.Tree("sim", values=True)
    loop(tree, 4)
    path = tmp_path / "v.cgtrace.json"
    tree.trace.save(path)
    loaded = cgviz.Trace.load(path)
    assert loaded.meta["profile"] == tree.trace.meta["profile"]
    assert loaded.steps[-1].snapshot.nodes[-1].outputs[0].values == tree.trace.steps[-1].snapshot.nodes[-1].outputs[0].values


def test_values_need_a_full_trace_and_options_are_checked():
    with pytest.raises(ValueError, match="values=True .* trace='full'"):
        cgviz.Tree("sim", trace="events", values=True)
    with pytest.raises(TypeError, match="profile must be True or False"):
        cgviz.Tree("sim", profile="yes")


def test_value_summaries_count_nan_and_inf_and_skip_them_in_the_statistics():
    s = value_summary(torch.tensor([1.0, float("nan"), float("inf"), -3.0, 5.0]))
    assert s["nan"] == 1 and s["inf"] == 1 and s["min"] == -3.0 and s["max"] == 5.0 and s["mean"] == 1.0
    assert s["head"][:1] == [1.0] and s["head"][1] == "nan"
    assert value_summary(torch.tensor([True, False, True]))["true"] == 2
    assert value_summary(torch.empty(0)) == {"n": 0}
    assert value_summary(torch.tensor([3, 4], dtype=torch.int64))["mean"] == 3.5
    assert math.isclose(value_summary(torch.tensor([3 + 4j]))["max"], 5.0)
    assert "1 NaN · 1 Inf" in value_text(s)


def test_the_page_shows_times_kernels_and_values():
    tree = cgviz.Tree("sim", values=True)
    loop(tree, 4)
    meta = dict(tree.trace.meta)
    meta["profile"] = {k: dict(v, kernels=[[PROFILER_KERNELS[2], 3]]) for k, v in meta["profile"].items()}
    data = page_data(Trace(steps=tree.trace.steps, meta=meta))
    graph = next(k for k, v in meta["profile"].items() if v["kind"] == "graph")
    assert data["profile"][graph]["kernels"] == [[kernel_label(PROFILER_KERNELS[2]), 3, PROFILER_KERNELS[2]]]
    entry = next(e for e in profile_entries(meta) if e.node == graph)
    assert entry.kernels == ((PROFILER_KERNELS[2], 3),)
    assert data["profile"][graph]["time"] == time_line(entry)
    assert "profile" not in dict(data["header"]["meta"])
    rows = [o for n in data["nodes"] for o in n[8]]
    assert any(r[7].startswith("[") and "max" in r[7] for r in rows)


def test_diagnose_warns_when_a_replay_costs_more_than_eager():
    steps = [Step(0, "execute", "replay", 1, function="g", node=1, duration=1e-4)]
    slow = {"1": {"function": "g", "kind": "graph", "replay_us": 500.0, "eager_us": 200.0,
                  "eager_is_first_call": False, "clock": "CUDA events"}}
    found = cgviz.diagnose(Trace(steps=steps, meta={"profile": slow})).of("time")
    assert found[0].severity == "warning" and found[0].numbers["speedup"] == 0.4
    fast = {"1": dict(slow["1"], replay_us=40.0)}
    found = cgviz.diagnose(Trace(steps=steps, meta={"profile": fast})).of("time")
    assert found[0].severity == "info" and "40 µs against 200 µs eager (5.0×)" in found[0].title
    assert "on the host" in found[0].title  # the call (100 µs) costs over twice the replay


@pytest.mark.parametrize("name", ["chain", "branching", "training"])
def test_the_shipped_gpu_traces_carry_kernels_and_times(name):
    from cgviz.data import gpu_trace

    trace = gpu_trace(name)
    assert trace.meta["backend"] == "cuda"
    graphs = [e for e in trace.meta["profile"].values() if e["kind"] == "graph"]
    assert graphs and all(e["kernels"] and e["clock"] == "CUDA events" for e in graphs)
    timed = [e for e in graphs if e["replay_us"] is not None]
    assert timed and all(e["replay_us"] > 0 for e in timed)
    data = page_data(trace)
    assert any(p["kernels"] and "replay" in p["time"] for p in data["profile"].values())


def test_the_profile_is_read_as_typed_entries_and_its_table_reads_alike():
    """Every view reads `meta["profile"]` through profile_entries; time_line also takes the
    table's own entries, as a notebook reads them."""
    import cgviz.data

    trace = cgviz.data.gpu_trace("chain")
    entries = profile_entries(trace.meta)
    assert [e.node for e in entries] == list(trace.meta["profile"])
    for entry in entries:
        raw = trace.meta["profile"][entry.node]
        assert (entry.function, entry.kind, entry.replay_us, entry.eager_us) == \
            (raw["function"], raw["kind"], raw.get("replay_us"), raw.get("eager_us"))
        assert entry.kernels == tuple((name, count) for name, count in raw.get("kernels") or ())
        assert entry.measured == (raw["clock"] == "CUDA events")
        assert time_line(entry) == time_line(raw)
    assert any(e.measured and e.kernels for e in entries)  # a GPU trace: CUDA-event times and kernels
    assert profile_entries({}) == profile_entries({"profile": None}) == []
    assert [e.node for e in profile_entries({"profile": {"1": {"kind": "graph"}, "2": "not an entry"}})] == ["1"]
