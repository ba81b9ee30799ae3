"""The timeline view: one tick per stored step, folds, generation lines and the current step."""

from __future__ import annotations

import pytest

from cgviz.trace.model import STEP_KINDS, Step, Trace
from cgviz.views.style import STEP_COLORS
from cgviz.views.timeline import timeline_figure, timeline_png, timeline_svg
from cgviz.views.timeline_data import timeline_folds, timeline_generations, timeline_items
from helpers import GPU_TRACES, by_gid, texts

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.colors import to_rgba  # noqa: E402


def synthetic_trace(n: int) -> Trace:
    """n stored steps of a long training run: generation, record/execute, folded replay loops."""
    steps, generation = [], 1
    cycle = ["generation", "warmup", "record", "execute", "execute", "path_end", "eager", "checkpoint_restore"]
    for i in range(n):
        kind = cycle[i % len(cycle)] if i % 97 else "error"
        if kind == "generation":
            generation += 1
        repeat, span = (50, 2) if kind == "execute" and i % 3 == 0 else (1, 1)
        steps.append(Step(i, kind, "why", generation, "f", 1, repeat=repeat, span=span))
    return Trace(steps)


# --- items ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["branching", "generations", "training", "fwd_bwd"])
def test_items_are_the_steps(scenario_traces, name):
    trace = scenario_traces[name]
    items = timeline_items(trace)
    assert len(items) == len(trace.steps)
    for i, (it, step) in enumerate(zip(items, trace.steps)):
        assert it["index"] == i and it["step_index"] == step.index
        assert it["kind"] == step.kind and it["color"] == STEP_COLORS[step.kind]
        assert (it["repeat"], it["span"], it["generation"]) == (step.repeat, step.span, step.generation)


def test_generation_boundaries_where_the_generation_changes(scenario_traces):
    trace = scenario_traces["generations"]
    expected = [i for i in range(1, len(trace.steps)) if trace.steps[i].generation != trace.steps[i - 1].generation]
    assert expected  # the scenario starts new generations
    gens = timeline_generations(timeline_items(trace))
    assert [g["index"] for g in gens] == expected
    assert [g["label"] for g in gens] == [f"gen {trace.steps[i].generation}" for i in expected]
    fig = timeline_figure(trace)
    lines = by_gid(fig, "timeline-generations")
    xs = sorted(float(seg[0][0]) for seg in lines.get_segments())
    assert xs == [i - 0.5 for i in expected]
    words = texts(fig)
    for i in expected:
        assert f"gen {trace.steps[i].generation}" in words
    assert f"gen {trace.steps[0].generation}" in words  # where the trace starts


def test_folded_block_is_a_band_labelled_with_its_repeat(scenario_traces):
    trace = scenario_traces["training"]
    folded = [s for s in trace.steps if s.repeat > 1]
    assert folded, "the training scenario folds its replay loop"
    folds = timeline_folds(timeline_items(trace))
    assert [(f["start"], f["end"], f["repeat"]) for f in folds] == [
        (s.index - s.span + 1, s.index, s.repeat) for s in folded
    ]
    # the loop starts a generation each time round: the band says which ones it covers
    last = folded[-1]
    first_gen, last_gen = folds[-1]["generations"]
    assert first_gen == trace.steps[last.index - last.span + 1].generation
    assert last_gen == last.snapshot.generation
    fig = timeline_figure(trace)
    bands = by_gid(fig, "timeline-folds")
    assert len(bands.get_paths()) == len(folds)
    for path, f in zip(bands.get_paths(), folds):
        assert path.vertices[:, 0].min() == pytest.approx(f["start"] - 0.5)
        assert path.vertices[:, 0].max() == pytest.approx(f["end"] + 0.5)
    assert bands.get_hatch()
    assert f"×{last.repeat} · gen {first_gen}–{last_gen}" in texts(fig)
    assert f"({trace.calls} with repeats)" in " ".join(texts(fig))


def test_ticks_match_items(scenario_traces):
    for trace in scenario_traces.values():
        items = timeline_items(trace)
        fig = timeline_figure(trace)
        assert fig.cgviz_items == items
        ticks = by_gid(fig, "timeline-steps")
        paths, faces, urls = ticks.get_paths(), ticks.get_facecolor(), ticks.get_urls()
        assert len(paths) == len(items)
        for path, face, url, it in zip(paths, faces, urls, items):
            v = path.vertices
            assert (v[:, 0].min() + v[:, 0].max()) / 2 == pytest.approx(it["index"])
            assert (v[:, 1].min(), v[:, 1].max()) == (0, 1)
            assert tuple(face) == pytest.approx(to_rgba(it["color"]))
            assert url == f"#step-{it['index']}"
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert len(legend) >= len({it["kind"] for it in items})


def test_current_step_is_marked(scenario_traces):
    trace = scenario_traces["branching"]
    for current in (0, 7, len(trace.steps) - 1):
        fig = timeline_figure(trace, current)
        box = by_gid(fig, "timeline-current")
        assert box.get_x() + box.get_width() / 2 == pytest.approx(current)
        marker = by_gid(fig, "timeline-current-marker")
        assert list(marker.get_xdata()) == [current]
        assert f"step {current + 1}: {trace.steps[current].headline()}" in texts(fig)
    fig = timeline_figure(trace)
    assert not [a for a in fig.findobj() if getattr(a, "get_gid", lambda: None)() == "timeline-current"]
    with pytest.raises(ValueError, match="out of range"):
        timeline_figure(trace, len(trace.steps))


def test_empty_and_one_step_traces():
    fig = timeline_figure(Trace())
    assert any("no steps yet" in t for t in texts(fig))
    assert timeline_items(Trace()) == [] and timeline_png(Trace()).startswith(b"\x89PNG")
    with pytest.raises(ValueError):
        timeline_figure(Trace(), 0)
    one = Trace([Step(0, "warmup", "first call of f", 1, "f", 0)])
    fig = timeline_figure(one, 0)
    ticks = by_gid(fig, "timeline-steps")
    assert len(ticks.get_paths()) == 1
    assert by_gid(fig, "timeline-current").get_x() < 0 < by_gid(fig, "timeline-current").get_x() + 1
    assert "Timeline: 1 step" in texts(fig)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["warmup"]
    assert '<g id="step-0"><title>step 1: warmup f → node 0 · generation 1</title>' in timeline_svg(one, 0)


def test_every_kind_has_its_colour_in_the_legend():
    steps = [Step(i, kind, "why", 1) for i, kind in enumerate(STEP_KINDS)]
    fig = timeline_figure(Trace(steps))
    legend = fig.legends[0]
    pairs = {t.get_text(): tuple(h.get_facecolor()) for t, h in zip(legend.get_texts(), legend.legend_handles)}
    from cgviz.views.style import STEP_LABELS

    for kind in STEP_KINDS:
        assert pairs[STEP_LABELS[kind]] == pytest.approx(to_rgba(STEP_COLORS[kind]))


def test_gpu_traces():
    for path in GPU_TRACES:
        trace = Trace.load(path)
        items = timeline_items(trace)
        assert [it["kind"] for it in items] == [s.kind for s in trace.steps]
        svg = timeline_svg(trace, len(trace.steps) // 2)
        assert svg.count('<g id="step-') == len(trace.steps)


def test_svg_and_png_are_deterministic(scenario_traces):
    trace = scenario_traces["fwd_bwd"]
    assert timeline_svg(trace, 3) == timeline_svg(trace, 3)
    assert timeline_png(trace, 3) == timeline_png(trace, 3)
    assert 'id="timeline-current"' in timeline_svg(trace, 3)


def test_ten_thousand_steps_render_fast_with_few_artists():
    trace = synthetic_trace(10_000)
    items = timeline_items(trace)
    assert len(items) == 10_000
    fig = timeline_figure(trace, 5_000)
    png = timeline_png(trace, 5_000)
    svg = timeline_svg(trace, 5_000)
    assert png.startswith(b"\x89PNG") and len(svg) < 1_000_000
    # dense: one image column per group of steps, not 10,000 artists
    dense = by_gid(fig, "timeline-steps-dense")
    assert dense.axes is by_gid(fig, "timeline-axes")
    assert dense.get_array().shape[1] < 2_000
    assert len(fig.findobj()) < 400
    assert len(by_gid(fig, "timeline-folds").get_paths()) == sum(1 for s in trace.steps if s.repeat > 1)
    # an error in a pixel column wins over the kinds around it
    columns = dense.get_array()[0]
    assert sum(1 for c in columns if tuple(c) == pytest.approx(to_rgba(STEP_COLORS["error"]))) >= 90


def test_a_dense_timeline_keeps_its_steps_pixels_in_the_svg():
    """The dense row of steps is an <image> whose PNG is in the drawing itself: the check that
    takes links out of a drawing keeps those pixels (and nothing else an href could hold)."""
    import base64
    import re

    from cgviz.views.svg_output import safe_svg

    svg = timeline_svg(synthetic_trace(2_000))
    (image,) = re.findall(r"<image\b[^>]*>", svg)
    assert 'id="timeline-steps-dense"' in image
    pixels = re.search(r'href="data:image/png;base64,([^"]+)"', image)
    assert pixels and base64.b64decode(pixels.group(1)).startswith(b"\x89PNG")
    for href in ("javascript:x()", "data:image/svg+xml;base64,PHN2Zz4=", "https://example.com/a.png",
                 "data:text/html,x", "data:image/png;base64,AA&quot;onload"):
        assert "href" not in safe_svg(f'<svg><image xlink:href="{href}"/></svg>')
    assert "href" not in safe_svg('<svg><a href="data:image/png;base64,AAAA"><text>k</text></a></svg>')
    assert safe_svg('<svg><image href="data:image/png;base64,AAAA" onload="x()"/></svg>') == (
        '<svg><image href="data:image/png;base64,AAAA" /></svg>')


@pytest.mark.parametrize("n", [1, 7, 19, 250])
def test_axis_counts_steps_from_one_as_the_explorer_does(n):
    trace = synthetic_trace(n)
    ax = by_gid(timeline_figure(trace), "timeline-axes")
    positions = list(ax.get_xticks())
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels
    assert [int(label) for label in labels] == [int(p) + 1 for p in positions]
    assert all(1 <= int(label) <= n for label in labels)
