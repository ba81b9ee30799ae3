"""How the views show a merged multi-rank trace: a timeline lane per rank, the ranks in words in
the page's header, and `cgviz info TRACE` rank by rank. A trace of one rank draws as before.

The merged traces are made on CPU: sim trees trained with test_ranks' loop (stamped with the
rank, world size and device that `rank_path` writes on a CUDA job), and hand-made steps whose
start times interleave the ranks.
"""

from __future__ import annotations

import pytest

import cgviz
from cgviz.cli import main
from cgviz.scenarios import run_scenario
from cgviz.trace.model import Trace
from cgviz.trace.ranks import merge, rank_traces
from cgviz.views.page_data import TIMELINE_SIZE, page_data
from cgviz.views.text import ranks_summary
from cgviz.views.timeline import timeline_figure, timeline_png

from helpers import by_gid
from test_ranks import ODD_STEP, _step, _trace, train

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.text import Text  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"


def _rank_trace(rank: int, world: int, odd_step: int | None = None) -> Trace:
    tree = cgviz.Tree(device="sim", name=f"rank {rank}")
    train(tree, odd_step)
    tree.trace.meta.update(rank=rank, world_size=world, device=f"cuda:{rank} ({H100})")
    return tree.trace


@pytest.fixture(scope="module")
def merged() -> Trace:
    """Two ranks trained in turn (rank 0's steps first), rank 1 with an odd batch."""
    return merge([_rank_trace(0, 2), _rank_trace(1, 2, ODD_STEP)])


def interleaved(world: int, steps: int = 6) -> Trace:
    """`world` ranks whose steps alternate in time, a new generation on each rank halfway."""
    kinds = ["warmup", "record", "execute", "generation", "record", "execute"]
    return merge([_trace([_step(i, kinds[i % len(kinds)], "f", 0, start=i + r / world,
                                generation=1 + (i >= steps // 2)) for i in range(steps)], rank=r, world_size=world)
                  for r in range(world)])


def lanes(fig) -> dict[str, float]:
    """Each lane's name and the y of its middle (the timeline's y tick labels)."""
    ax = by_gid(fig, "timeline-axes")
    return {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks())}


def tick_centres(fig) -> list[tuple[float, float]]:
    ticks = by_gid(fig, "timeline-steps")
    return [((p.vertices[:, 0].min() + p.vertices[:, 0].max()) / 2, (p.vertices[:, 1].min() + p.vertices[:, 1].max()) / 2)
            for p in ticks.get_paths()]


# -- the timeline --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda m: m, lambda m: interleaved(2), lambda m: interleaved(4)],
                         ids=["trained", "interleaved-2", "interleaved-4"])
def test_each_rank_has_a_lane_and_each_step_is_in_its_ranks_lane_at_its_position(merged, make):
    trace = make(merged)
    world = len(trace.meta["ranks"])
    assert {s.rank for s in trace.steps} == set(range(world))
    for figsize in (None, TIMELINE_SIZE):
        fig = timeline_figure(trace, figsize=figsize)
        assert fig.axes[0] is by_gid(fig, "timeline-axes")  # the page reads x positions off the first axes
        lane = lanes(fig)
        assert list(lane) == [f"rank {r}" for r in range(world)]
        assert [lane[f"rank {r}"] for r in range(world)] == sorted(lane.values(), reverse=True)  # rank 0 on top
        centres = tick_centres(fig)
        assert len(centres) == len(trace.steps)
        for i, ((x, y), step) in enumerate(zip(centres, trace.steps)):
            assert x == pytest.approx(i)
            assert y == pytest.approx(lane[f"rank {step.rank}"])
        assert f"on {world} ranks" in " ".join(t.get_text() for t in fig.findobj(Text))


def test_each_lane_has_its_own_generation_lines():
    trace = interleaved(2)
    fig = timeline_figure(trace, figsize=TIMELINE_SIZE)
    lane = lanes(fig)
    lines = by_gid(fig, "timeline-generations").get_segments()
    starts = [i for i, s in enumerate(trace.steps) if s.kind == "generation"]  # one per rank
    assert sorted(seg[0][0] for seg in lines) == [i - 0.5 for i in starts]
    for seg in lines:
        step = trace.steps[int(seg[0][0] + 0.5)]
        low, high = sorted((seg[0][1], seg[1][1]))
        assert low < lane[f"rank {step.rank}"] < high
        others = [y for name, y in lane.items() if name != f"rank {step.rank}"]
        assert not any(low < y < high for y in others)  # the line stays in its lane


def test_the_current_step_is_outlined_in_its_lane(merged):
    current = next(i for i, s in enumerate(merged.steps) if s.rank == 1)
    fig = timeline_figure(merged, current)
    box = by_gid(fig, "timeline-current")
    assert box.get_x() + box.get_width() / 2 == pytest.approx(current)
    assert box.get_y() + box.get_height() / 2 == pytest.approx(lanes(fig)["rank 1"])
    assert list(by_gid(fig, "timeline-current-marker").get_xdata()) == [current]


@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_lanes_fit_the_pages_timeline_and_stay_readable(world):
    fig = timeline_figure(interleaved(world), figsize=TIMELINE_SIZE)
    ax = by_gid(fig, "timeline-axes")
    lane = lanes(fig)
    assert len(lane) == world  # every lane named
    ys = sorted(ax.transData.transform([(0, y) for y in lane.values()])[:, 1])
    assert min(b - a for a, b in zip(ys, ys[1:])) >= 9  # pixels between lanes: names do not overlap
    tick = by_gid(fig, "timeline-steps").get_paths()[0].vertices
    height = ax.transData.transform((0, tick[:, 1].max()))[1] - ax.transData.transform((0, tick[:, 1].min()))[1]
    assert height >= 5  # pixels
    box = ax.get_position()
    assert 0 < box.y0 and box.y1 < 1  # inside the figure, between the title and the legend
    assert timeline_png(interleaved(world), figsize=TIMELINE_SIZE).startswith(b"\x89PNG")


def test_dense_lanes_are_one_image_with_a_row_per_rank():
    trace = interleaved(2, steps=1500)
    fig = timeline_figure(trace, figsize=TIMELINE_SIZE)
    image = by_gid(fig, "timeline-steps-dense").get_array()
    assert image.shape[0] == 3  # rank 1, a clear gap, rank 0 (bottom up)
    assert (image[1, :, 3] == 0).all()
    assert (image[0, :, 3] > 0).any() and (image[2, :, 3] > 0).any()
    assert list(lanes(fig)) == ["rank 0", "rank 1"]


def test_a_trace_of_one_rank_has_one_unnamed_lane():
    trace = run_scenario("branching", "sim").trace
    fig = timeline_figure(trace)
    assert lanes(fig) == {}
    assert not [t for t in fig.findobj(Text) if t.get_text().startswith("rank ")]
    assert all(y == pytest.approx(0.5) for _, y in tick_centres(fig))


# -- the header ----------------------------------------------------------------------------------
def test_the_pages_header_says_the_ranks_in_words(merged):
    header = page_data(merged, [])["header"]
    meta = dict(header["meta"])
    assert meta["ranks"] == f"2 ranks of world size 2 on {H100}: rank 0 cuda:0 · rank 1 cuda:1"
    assert "world_size" not in meta  # said in the ranks' line
    assert not any(c in text for text in meta.values() for c in "{}[]")


def test_the_ranks_summary_says_only_what_differs_between_the_ranks():
    hosts = {"world_size": 4, "ranks": [
        {"rank": r, "device": f"cuda:{r % 2}", "hostname": f"node{r // 2}", "backend": "torch.compile",
         "local_rank": r % 2, "profile": {"0": {}}} for r in range(4)]}
    assert ranks_summary(hosts) == ("4 ranks of world size 4: rank 0 cuda:0 node0 · rank 1 cuda:1 node0 · "
                                    "rank 2 cuda:0 node1 · rank 3 cuda:1 node1")
    mixed = {"ranks": [{"rank": 0, "device": f"cuda:0 ({H100})"}, {"rank": 1, "device": "cuda:1 (NVIDIA A100)",
                                                                  "trace_level": "events"}]}
    assert ranks_summary(mixed) == (f"2 ranks: rank 0 cuda:0 ({H100}) · rank 1 cuda:1 (NVIDIA A100) "
                                    "trace level events")
    assert ranks_summary({"ranks": [{"rank": 0, "backend": "sim"}, {"rank": 1, "backend": "sim"}]}) == \
        "2 ranks: rank 0 · rank 1"


# -- cgviz info TRACE ----------------------------------------------------------------------------
def test_cli_info_lists_each_ranks_steps_and_graphs(merged, tmp_path, capsys):
    path = tmp_path / "all.cgtrace.json"
    merged.save(path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"2 ranks of world size 2 on {H100}: rank 0 cuda:0 · rank 1 cuda:1" in out
    lines = out.splitlines()
    for rank, part in rank_traces(merged).items():
        counts = part.trace.counts()
        line = next(line for line in lines if line.startswith(f"  rank {rank}: "))
        assert f"{len(part.trace.steps)} steps ({part.trace.calls} calls)" in line
        assert f"{counts['record']} graphs recorded · {counts['execute']} replays" in line


def test_cli_info_on_a_trace_of_one_rank_has_no_rank_lines(tmp_path, capsys):
    path = tmp_path / "one.cgtrace.json"
    trace = run_scenario("chain", "sim").trace
    trace.save(path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: {len(trace.steps)} steps") and "rank" not in out
    assert main(["info", str(tmp_path / "missing.cgtrace.json")]) == 1
    assert "trace file not found" in capsys.readouterr().err

