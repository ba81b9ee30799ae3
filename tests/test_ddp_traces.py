"""The two-rank DDP run recorded on two GPUs with NCCL (tests/gpu/ddp_reduce_overhead.py under
torchrun, shipped in cgviz/data/ddp): merged, the planted batch of another size on rank 1 is
flagged as a divergence, and the run without it has none."""

from __future__ import annotations

import pytest

import cgviz
from cgviz.data import ddp_traces
from cgviz.trace.ranks import divergence, rank_traces
from cgviz.views.page_data import page_data


def test_each_rank_recorded_and_replayed_its_own_tree_on_the_gpu():
    for run in ("planted", "clean"):
        merged = cgviz.merge(ddp_traces(run))
        parts = rank_traces(merged)
        assert sorted(parts) == [0, 1]
        for rank, part in parts.items():
            meta = part.trace.meta
            assert meta["rank"] == rank and meta["world_size"] == 2
            assert str(meta["device"]).startswith(f"cuda:{rank} (") and meta["backend"] == "torch.compile"
            assert meta["torch"].startswith("2.") and "devices" not in meta  # one device a rank
            counts = part.trace.counts()
            assert counts["record"] >= 2 and counts["execute"] >= 10


def test_the_planted_batch_is_a_divergence_of_rank_1_and_the_clean_run_has_none():
    merged = cgviz.merge(ddp_traces("planted"))
    found = [f for f in divergence(merged) if f.kind == "divergence"]
    assert found, "the planted batch was not flagged"
    for f in found:
        assert f.numbers["decisions"][1] != "execute" and f.numbers["decisions"][0] == "execute"
        assert any(merged.steps[i].rank == 1 for i in f.evidence)
    assert divergence(cgviz.merge(ddp_traces("clean"))) == []


def test_the_merged_page_has_a_lane_and_a_tree_per_rank():
    merged = cgviz.merge(ddp_traces("planted"))
    data = page_data(merged, range(len(merged.steps)))
    assert "rank 0" in data["timeline"] and "rank 1" in data["timeline"]
    last = len(merged.steps) - 1
    runs = data["trees"][data["steps"][last][0]]
    svg = "\n".join(data["lines"][j] for a, b in zip(runs[::2], runs[1::2]) for j in range(a, a + b))
    assert ">rank 0 · " in svg and ">rank 1 · " in svg


def test_an_unknown_run_is_refused_naming_the_runs():
    with pytest.raises(KeyError, match="there are: clean, planted"):
        ddp_traces("nope")
