"""Multi-rank traces: `{rank}` in save paths, `cgviz.merge`, `cgviz merge`, and where ranks diverged.

The job is real: two processes (torch.multiprocessing.spawn) join a gloo process group and each
trains through a sim tree, all-reducing a loss each step; in the planted run rank 1 gets a batch
of another shape at one step. Each rank saves through the `{rank}` placeholder; the merged trace
must name that step and both ranks, and the run without the planted batch must show no divergence.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import cgviz
from cgviz.cli import main
from cgviz.trace import io
from cgviz.trace.model import Block, NodeView, Segment, Snapshot, Step, Trace
from cgviz.trace.ranks import (
    MergeError, RankError, diagnose_merged, divergence, is_merged, merge, rank_path, rank_traces,
)
from cgviz.views.text import headline
from helpers import ROOT

OLD = ROOT / "tests" / "data" / "old_layout"
WORLD = 2
STEPS = 8
ODD_STEP = 5  # the step at which rank 1 gets a batch of 3 rows instead of 4: calls number 6 of f and g


# -- the two-rank job ------------------------------------------------------------------------------
def train(tree: "cgviz.Tree", odd_step: int | None = None) -> None:
    """A small training loop through `tree`: a new generation each step, the loss all-reduced
    across the ranks when a process group is up."""
    w = torch.linspace(0, 1, 32).reshape(8, 4)
    f = tree.wrap(lambda x, w: (x @ w).relu(), static=(1,), name="f")
    g = tree.wrap(lambda h: h.sum(dim=1), name="g")
    for i in range(STEPS):
        tree.mark_step()
        rows = 3 if i == odd_step else 4
        y = g(f(torch.full((rows, 8), float(i)), w))
        loss = y.sum().reshape(1).clone()
        if dist.is_initialized():
            dist.all_reduce(loss)


def _rank_job(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        for name, odd in (("planted", ODD_STEP if rank == 1 else None), ("clean", None)):
            tree = cgviz.Tree(device="sim", name=f"{name} rank {rank}")
            train(tree, odd)
            tree.trace.save(rank_path(os.path.join(out, name + "-{rank}-of-{world_size}.cgtrace.json"), tree.trace))
            dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ranks")
    with pytest.MonkeyPatch.context() as mp_env:
        # torchrun's variables saying otherwise: the process group's rank must win over them
        mp_env.setenv("RANK", "7")
        mp_env.setenv("WORLD_SIZE", "9")
        mp.spawn(_rank_job, args=(f"file://{out / 'init'}", str(out)), nprocs=WORLD, join=True)
    return out


@pytest.fixture(scope="module")
def planted(job) -> Trace:
    return merge(sorted(job.glob("planted-*.cgtrace.json")))


@pytest.fixture(scope="module")
def clean(job) -> Trace:
    return merge(sorted(job.glob("clean-*.cgtrace.json")))


def test_each_rank_saved_its_trace_through_the_placeholder_with_its_rank_in_the_meta(job):
    names = sorted(p.name for p in job.glob("*.cgtrace.json"))
    assert names == [f"{n}-{r}-of-2.cgtrace.json" for n in ("clean", "planted") for r in (0, 1)]
    for r in (0, 1):
        meta = Trace.load(job / f"planted-{r}-of-2.cgtrace.json").meta
        assert (meta["rank"], meta["world_size"], meta["backend"]) == (r, 2, "sim")


def test_the_planted_divergence_names_the_call_its_steps_and_both_ranks(planted):
    found = {f.numbers["function"]: f for f in divergence(planted) if f.kind == "divergence"}
    assert sorted(found) == ["f", "g"]
    f = found["f"]
    odd = next(i for i, s in enumerate(planted.steps)
               if s.rank == 1 and s.kind == "warmup" and s.function == "f" and "float32[3, 8]" in s.reason)
    assert f.evidence[0] == odd
    other = planted.steps[f.evidence[1]]
    assert (other.rank, other.kind, other.function) == (0, "execute", "f")
    assert f.numbers["call"] == ODD_STEP + 1
    assert f.numbers["decisions"] == {0: "execute", 1: "warmup"}
    assert f.numbers["differing_calls"] == 1
    assert f"call {ODD_STEP + 1} of f" in f.title
    assert f"rank 1 warmed up (step {odd + 1})" in f.title
    assert f"rank 0 replayed (step {f.evidence[1] + 1})" in f.title
    assert "drop_last=True" in f.suggestion and "mark_dynamic" not in f.suggestion
    assert f.severity == "warning"


def test_the_run_without_the_planted_batch_has_no_divergence(clean):
    assert is_merged(clean) and sorted(rank_traces(clean)) == [0, 1]
    assert divergence(clean) == []


def test_merged_steps_interleave_the_ranks_by_start_time_and_keep_each_ranks_order(planted, job):
    ranks = [s.rank for s in planted.steps]
    first_1, last_0 = ranks.index(1), len(ranks) - 1 - ranks[::-1].index(0)
    assert first_1 < last_0  # the ranks ran side by side, in lockstep through the all-reduce
    for r, part in rank_traces(planted).items():
        own = Trace.load(job / f"planted-{r}-of-2.cgtrace.json")
        assert [dataclasses.replace(s, rank=None) for s in part.trace.steps] == own.steps
        assert [planted.steps[i].rank for i in part.indices] == [r] * len(own.steps)
    assert [s.index for s in planted.steps] == list(range(len(planted.steps)))
    meta = planted.meta
    assert meta["world_size"] == 2 and meta["backend"] == "sim"
    assert [m["rank"] for m in meta["ranks"]] == [0, 1]


def test_diagnosing_a_merged_trace_gives_each_ranks_findings_once_and_leads_with_divergence(planted, clean):
    merged = diagnose_merged(clean)
    # the ranks' trees each record f as a root once: no re-recording, whatever node ids say
    assert not merged.of("rerecord")
    assert any(f.title.startswith("every rank: ") for f in merged)
    assert len(merged.of("coverage")) == 1
    for f in diagnose_merged(planted):
        if f.title.startswith("rank "):
            rank = int(f.title.split(":")[0].split()[1])
            assert all(planted.steps[i].rank == rank for i in f.evidence), f.title
    first = [f.kind for f in diagnose_merged(planted) if f.severity == "warning"][:2]
    assert first == ["divergence", "divergence"]


# -- {rank} in paths -----------------------------------------------------------------------------
@pytest.fixture
def no_rank(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert not dist.is_initialized()
    return monkeypatch


def test_a_path_without_placeholders_is_kept_and_needs_no_rank(no_rank):
    trace = Trace(meta={"backend": "sim"})
    assert rank_path("run.cgtrace.json", trace) == "run.cgtrace.json"
    assert trace.meta == {"backend": "sim"}


def test_placeholders_are_filled_from_the_environment_torchrun_sets(no_rank):
    no_rank.setenv("RANK", "3")
    no_rank.setenv("WORLD_SIZE", "4")
    no_rank.setenv("LOCAL_RANK", "1")
    trace = Trace(meta={"device": "cpu (simulated CUDA pool)"})
    assert rank_path("out/{epoch}/run-{rank}-of-{world_size}.json", trace) == "out/{epoch}/run-3-of-4.json"
    assert trace.meta == {"device": "cpu (simulated CUDA pool)", "rank": 3, "world_size": 4, "local_rank": 1}
    assert rank_path(Path("run-{rank}.json")) == Path("run-3.json")


def test_a_placeholder_without_a_rank_is_refused_naming_it(no_rank):
    with pytest.raises(RankError, match=r"cannot fill \{rank\} in 'run-\{rank\}.json'.*RANK.*init_process_group"):
        rank_path("run-{rank}.json")
    no_rank.setenv("RANK", "0")
    with pytest.raises(RankError, match=r"\{world_size\}.*WORLD_SIZE"):
        rank_path("run-{rank}-of-{world_size}.json")
    no_rank.setenv("RANK", "first")
    with pytest.raises(RankError, match="RANK environment variable is 'first'"):
        rank_path("run-{rank}.json")
    trace = Trace()
    assert rank_path("run.json", trace) == "run.json" and trace.meta == {}  # no rank asked for: saved as it is


def test_the_magics_save_fills_the_placeholder_or_says_why_not(no_rank, tmp_path, capsys):
    from cgviz.magics import CudaGraphMagics

    tree = cgviz.Tree(device="sim", name="magic save")
    train(tree)
    magics = CudaGraphMagics(shell=None)
    assert magics._save(tree.trace, "tree 'magic save'", str(tmp_path / "cell-{rank}.cgtrace.json")) is None
    assert "{rank}" in capsys.readouterr().err and not list(tmp_path.iterdir())
    no_rank.setenv("RANK", "1")
    no_rank.setenv("WORLD_SIZE", "2")
    saved = magics._save(tree.trace, "tree 'magic save'", str(tmp_path / "cell-{rank}.cgtrace.json"))
    assert saved == str(tmp_path / "cell-1.cgtrace.json")
    assert Trace.load(saved).meta["rank"] == 1


def test_observe_torch_saves_to_the_ranks_path_and_refuses_before_running(no_rank, tmp_path):
    from cgviz.observe import _hooks

    with pytest.raises(RankError, match=r"\{rank\}"):
        with cgviz.observe_torch(path=tmp_path / "obs-{rank}.cgtrace.json"):
            pytest.fail("the block ran without a rank to fill {rank}")
    assert _hooks.ACTIVE == []
    no_rank.setenv("RANK", "1")
    with cgviz.observe_torch(path=tmp_path / "obs-{rank}.cgtrace.json", trace="events"):
        pass
    assert Trace.load(tmp_path / "obs-1.cgtrace.json").meta["rank"] == 1


# -- merging ----------------------------------------------------------------------------------------
def _step(i: int, kind: str, function: str | None = None, node: int | None = None, *, start: float | None = None,
          repeat: int = 1, span: int = 1, reason: str = "", generation: int = 1) -> Step:
    return Step(index=i, kind=kind, reason=reason or f"{kind} {function}", generation=generation, function=function,
                node=node, repeat=repeat, span=span, start=start)


def _trace(steps: list[Step], **meta) -> Trace:
    for i, s in enumerate(steps):
        s.index = i
    return Trace(steps=steps, meta={"backend": "sim", **meta})


def test_merge_orders_by_start_time_keeping_folded_blocks_whole_and_untimed_steps_after_theirs():
    a = _trace([_step(0, "warmup", "f", 0, start=0.0), _step(1, "record", "f", 1, start=2.0),
                _step(2, "generation"), _step(3, "execute", "f", 1, start=2.5, repeat=5, span=2),
                _step(4, "path_end")], rank=0)
    b = _trace([_step(0, "warmup", "f", 0, start=1.0), _step(1, "record", "f", 1, start=2.2),
                _step(2, "execute", "f", 1, start=3.0)], rank=1)
    merged = merge([b, a])
    order = [(s.rank, s.kind) for s in merged.steps]
    # a's folded block (generation, execute, ×5) stays whole, at its first start time (2.5); a's
    # path end has no start time: it follows the step before it, ahead of b's replay at 3.0
    assert order == [(0, "warmup"), (1, "warmup"), (0, "record"), (1, "record"), (0, "generation"), (0, "execute"),
                     (0, "path_end"), (1, "execute")]
    assert merged.steps[5].repeat == 5 and merged.steps[5].span == 2
    assert merged.expanded()[4:14] == [merged.steps[4], merged.steps[5]] * 5
    assert merged.calls == a.calls + b.calls
    # the inputs are untouched: the merged steps are copies that keep their snapshots
    assert a.steps[0].rank is None and a.steps[0].index == 0


def test_merge_without_start_times_goes_rank_by_rank_and_keeps_snapshot_objects():
    snap = Snapshot(nodes=[NodeView(0, "f", "warmup", None, [], 1, 0, [])], current_node=0, path=[0], state="warmup",
                    generation=1, segments=[Segment(0, 512, "pool", [Block(0, 512, True, node=0, output=0)])])
    a = _trace([_step(0, "warmup", "f", 0), _step(1, "record", "f", 1)])
    a.steps[0].snapshot = snap
    b = _trace([_step(0, "warmup", "f", 0)])
    merged = merge([a, b])  # no ranks in their metas: their places in the list
    assert [(s.rank, s.index) for s in merged.steps] == [(0, 0), (0, 1), (1, 2)]
    assert merged.steps[0].snapshot is snap and merged.steps[2].snapshot is None
    assert merged.meta["ranks"] == [{"backend": "sim", "rank": 0}, {"backend": "sim", "rank": 1}]
    assert "world_size" not in merged.meta


def test_merge_refuses_what_cannot_be_one_job(tmp_path):
    r0, r0_again = _trace([_step(0, "warmup", "f")], rank=0), _trace([_step(0, "warmup", "f")], rank=0)
    with pytest.raises(MergeError, match="rank 0 is in two traces: trace 1 and trace 2"):
        merge([r0, r0_again])
    with pytest.raises(MergeError, match="different backends: trace 1 has 'sim', trace 2 has 'torch.compile'"):
        merge([r0, Trace(meta={"backend": "torch.compile", "rank": 1})])
    with pytest.raises(MergeError, match="different schema versions"):
        merge([r0, Trace(meta={"rank": 1}, schema_version=1)])
    with pytest.raises(MergeError, match="different world sizes"):
        merge([_trace([], rank=0, world_size=2), _trace([], rank=1, world_size=4)])
    with pytest.raises(MergeError, match="is rank 2, but the world size is 2"):
        merge([_trace([], rank=0, world_size=2), _trace([], rank=2, world_size=2)])
    with pytest.raises(MergeError, match="rank '1' in its meta"):
        merge([_trace([], rank="1")])
    with pytest.raises(MergeError, match="nothing to merge"):
        merge([])
    with pytest.raises(TypeError, match="paths or cgviz Traces, not int"):
        merge([r0, 3])
    with pytest.raises(FileNotFoundError):
        merge([tmp_path / "missing.cgtrace.json"])


def test_a_merged_trace_merges_again_with_more_ranks():
    a, b, c = (_trace([_step(0, "warmup", "f", 0, start=float(r))], rank=r) for r in range(3))
    merged = merge([merge([a, b]), c])
    assert [s.rank for s in merged.steps] == [0, 1, 2]
    assert [m["rank"] for m in merged.meta["ranks"]] == [0, 1, 2]


def test_old_single_rank_traces_load_and_merge_and_the_merged_trace_round_trips(tmp_path):
    paths = [OLD / "training.cgtrace.json", OLD / "chain.cgtrace.json"]
    old = [Trace.load(p) for p in paths]
    assert all(t.schema_version == 1 and all(s.rank is None for s in t.steps) for t in old)
    merged = merge(paths)
    assert [s.rank for s in merged.steps] == [0] * len(old[0].steps) + [1] * len(old[1].steps)
    merged.save(tmp_path / "all.cgtrace.json")
    back = Trace.load(tmp_path / "all.cgtrace.json")
    assert back.steps == merged.steps  # ranks, snapshots and all
    assert back.meta == merged.meta and back.meta["ranks"][1]["scenario"] == "chain"
    assert [s.headline() for s in back.steps][:1] == [f"rank 0 · {headline(old[0].steps[0])}"]


def test_a_trace_of_one_rank_is_written_as_before_without_ranks():
    trace = Trace.load(OLD / "training.cgtrace.json")
    steps = json.loads(io.dumps(trace))["steps"]
    assert steps and all("rank" not in s for s in steps)
    assert all("rank" in s for s in json.loads(io.dumps(merge([trace])))["steps"])


def test_loading_refuses_a_negative_rank_and_a_folded_block_of_two_ranks():
    merged = merge([_trace([_step(0, "execute", "f", 0)], rank=0),
                    _trace([_step(0, "execute", "f", 0, repeat=3)], rank=1)])
    data = io.to_dict(merged)
    data["steps"][0]["rank"] = -1
    with pytest.raises(io.TraceFormatError, match="step 0: field 'rank' must be a rank number"):
        io.from_dict(json.loads(json.dumps(data)))
    data["steps"][0]["rank"] = 0
    data["steps"][1]["span"] = 2
    with pytest.raises(io.TraceFormatError, match="step 1: field 'span' covers steps of another rank"):
        io.from_dict(json.loads(json.dumps(data)))


# -- divergence, by hand ------------------------------------------------------------------------------
def test_graph_counts_eager_fallbacks_and_call_counts_that_differ_per_rank():
    cpu = "g ran eagerly: an input is on the cpu device (input x)"
    r0 = _trace([_step(0, "warmup", "f", 0), _step(1, "record", "f", 1), _step(2, "execute", "f", 1, repeat=3)],
                rank=0)
    r1 = _trace([_step(0, "warmup", "f", 0), _step(1, "record", "f", 1), _step(2, "record", "f", 2),
                 _step(3, "execute", "f", 2, repeat=2), _step(4, "eager", "g", reason=cpu)], rank=1)
    merged = merge([r0, r1])
    found = {f.kind: f for f in divergence(merged)}
    assert set(found) == {"divergence", "divergence_graphs", "divergence_eager"}
    decided = [f for f in divergence(merged) if f.kind == "divergence" and f.numbers["function"] == "f"][0]
    assert decided.numbers["call"] == 3 and decided.numbers["decisions"] == {0: "execute", 1: "record"}
    assert merged.steps[decided.evidence[0]].kind == "record" and merged.steps[decided.evidence[0]].rank == 1
    counts = [f for f in divergence(merged) if f.kind == "divergence" and f.numbers["function"] == "g"][0]
    assert counts.numbers["calls"] == {0: 0, 1: 1} and "rank 0: never" in counts.title
    graphs = found["divergence_graphs"]
    assert graphs.numbers["records"] == {0: 1, 1: 2}
    assert [merged.steps[i].rank for i in graphs.evidence] == [1, 1]
    eager = found["divergence_eager"]
    assert "g ran eagerly on rank 1 only (1 time), not on rank 0" in eager.title
    assert "GPU" in eager.suggestion  # the fix for a CPU input
    assert divergence(r0) == [] and divergence(merge([r0])) == []


def test_a_rank_that_recompiled_is_aligned_with_the_others_by_frame():
    name = "forward [0/{}] (forward)"
    both = [_step(0, "warmup", name.format(0), 0), _step(1, "record", name.format(0), 1)]
    r0 = _trace([*both, _step(2, "execute", name.format(0), 1, repeat=3)], rank=0)
    r1 = _trace([*(dataclasses.replace(s) for s in both), _step(2, "execute", name.format(0), 1),
                 _step(3, "warmup", name.format(1), 2), _step(4, "execute", name.format(0), 1)], rank=1)
    found = divergence(merge([r0, r1]))
    assert [(f.numbers["function"], f.numbers["call"], f.numbers["decisions"]) for f in found[:1]] == \
           [("forward [0/*] (forward)", 4, {0: "execute", 1: "warmup"})]
    assert "rank 1 warmed up" in found[0].title


def test_long_folded_loops_are_compared_without_unrolling():
    n = 10**6
    r0 = _trace([_step(0, "record", "f", 0), _step(1, "execute", "f", 0, repeat=n), _step(2, "warmup", "f", 1)], rank=0)
    r1 = _trace([_step(0, "record", "f", 0), _step(1, "execute", "f", 0, repeat=n - 1),
                 _step(2, "execute", "f", 0, repeat=2)], rank=1)
    found = divergence(merge([r0, r1]))
    assert [(f.numbers["call"], f.numbers["decisions"]) for f in found] == [(n + 2, {0: "warmup", 1: "execute"})]


# -- the command -------------------------------------------------------------------------------------
def test_cli_merge_writes_the_merged_trace_and_says_where_the_ranks_diverged(job, tmp_path, capsys):
    out = tmp_path / "all.cgtrace.json"
    assert main(["merge", str(job / "planted-*.cgtrace.json"), "-o", str(out)]) == 0  # the wildcard as typed
    said = capsys.readouterr().out
    assert "ranks 0, 1 of world size 2" in said and f"call {ODD_STEP + 1} of f" in said
    merged = Trace.load(out)
    assert is_merged(merged) and {s.rank for s in merged.steps} == {0, 1}
    clean = sorted(str(p) for p in job.glob("clean-*.cgtrace.json"))
    assert main(["merge", *clean, "-o", str(tmp_path / "clean.cgtrace.json")]) == 0
    assert "no divergence" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["missing", "corrupt", "duplicate", "schema", "same", "output"])
def test_cli_merge_refuses_with_one_line(case, job, tmp_path, capsys):
    ours = str(job / "clean-0-of-2.cgtrace.json")
    out = tmp_path / "all.cgtrace.json"
    if case == "missing":
        args, said = [ours, str(tmp_path / "nope.cgtrace.json")], "trace file not found"
    elif case == "corrupt":
        bad = tmp_path / "bad.cgtrace.json"
        bad.write_text('{"format": "cgviz-trace", "schema_version": 2, "steps": [', encoding="utf-8")
        args, said = [ours, str(bad)], "bad.cgtrace.json: truncated or not JSON"
    elif case == "duplicate":
        copy = tmp_path / "copy.cgtrace.json"
        copy.write_bytes(Path(ours).read_bytes())
        args, said = [ours, str(copy)], "rank 0 is in two traces"
    elif case == "schema":
        args, said = [ours, str(OLD / "chain.cgtrace.json")], "different schema versions"
    elif case == "same":
        args, said = [ours, ours], "given twice"
    else:
        args, said, out = [ours, str(job / "clean-1-of-2.cgtrace.json")], "one of the traces being merged", Path(ours)
    before = Path(ours).read_bytes()
    assert main(["merge", *args, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cgviz merge: ") and said in err and err.count("\n") == 1, err
    assert Path(ours).read_bytes() == before
    assert case == "output" or not out.exists()


def test_cli_merge_needs_an_output(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["merge", "run-0.cgtrace.json"])
    assert exc.value.code == 2 and "-o/--output" in capsys.readouterr().err


# -- the page ------------------------------------------------------------------------------------------
def test_the_page_of_a_merged_trace_names_each_steps_rank_and_shows_its_own_snapshot(planted, job):
    from cgviz.views.page_data import page_data

    data = page_data(planted, renderer="builtin")
    rows = data["rows"]
    assert all(row[1].startswith(f"rank {s.rank} · ") for row, s in zip(rows, planted.steps))
    assert any(row[1] == "rank 1 · warmup f → node 4 · generation 7" for row in rows)
    own = {r: Trace.load(job / f"planted-{r}-of-2.cgtrace.json") for r in (0, 1)}
    for r, part in rank_traces(planted).items():
        assert [s.snapshot for s in part.trace.steps] == [s.snapshot for s in own[r].steps]
    html = cgviz.to_html(planted)
    assert "rank 1 · warmup f → node 4 · generation 7" in html


def test_the_perfetto_export_of_a_merged_trace_has_a_process_per_rank_on_one_clock(planted):
    from cgviz.trace.chrome_trace import to_chrome_trace

    data = to_chrome_trace(planted)
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"}
    assert len(names) == 2 and sorted(n.rsplit(" · ", 1)[-1] for n in names.values()) == ["rank 0", "rank 1"]
    origin = data["otherData"]["start_unix_s"]
    parts = rank_traces(planted)
    for pid, name in names.items():
        rank = int(name.rsplit(" ", 1)[-1])
        slices = [e for e in data["traceEvents"] if e["pid"] == pid and e["ph"] == "X"]
        first = min(slices, key=lambda e: e["ts"])
        step = parts[rank].trace.steps[first["args"]["step"]]
        assert first["ts"] == pytest.approx((step.start - origin) * 1e6, abs=1.0)  # each rank on the same clock
        calls = sum(1 for e in slices)
        assert calls == sum(t for s, t in zip(parts[rank].trace.steps, parts[rank].trace.repeats())
                            if s.kind not in ("generation", "path_end", "checkpoint_restore"))
