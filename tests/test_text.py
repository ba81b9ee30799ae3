"""One wording for every host: views/text.py writes the sentences, the hosts only place them."""

from __future__ import annotations

from types import SimpleNamespace

from cgviz.scenarios import run_scenario
from cgviz.trace.model import OutputView, Snapshot, Step
from cgviz.views.page_data import page_data
from cgviz.views.text import (
    cell_summary, format_bytes, generation_banner, headline, output_row, path_line, step_lines, wrap,
)


def test_bytes_switch_units_at_1024():
    assert [format_bytes(n) for n in (0, 1023, 1024, 1536, 1024**2, 5 * 1024**3)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "1.0 MiB", "5.0 GiB"]
    assert format_bytes(-512, sign=True) == "−512 B" and format_bytes(2048, sign=True) == "+2.0 KiB"


def test_a_folded_step_says_how_often_it_ran():
    step = Step(7, "execute", "replay", 2, function="f", node=3, repeat=40, span=2)
    assert headline(step) == "execute f → node 3 · generation 2 · ×40 (last 2 steps)"
    assert step.headline() == headline(step)


def test_a_generation_step_names_its_generation_once():
    step = Step(4, "generation", "mark_step(): generation 2 ends, generation 3 begins", 3)
    assert headline(step) == "generation 3 begins"
    assert headline(Step(4, "generation", "mark_step()", 3, repeat=5)) == "generation 3 begins · ×5"
    on_device = Step(4, "generation", "mark_step()", 3)
    on_device.device = "cuda:1"
    assert headline(on_device) == "cuda:1 · generation 3 begins"


def test_a_long_path_is_shortened_in_the_middle():
    snap = Snapshot(nodes=[], current_node=19, path=list(range(20)), state="execution", generation=3)
    line = path_line(snap)
    assert line.startswith("generation 3 · replaying path 0 → 1 → 2 → … → 17 → 18 → 19 (20 nodes)")
    assert line.endswith("current node 19")
    empty = Snapshot(nodes=[], current_node=None, path=[], state="none", generation=1)
    assert "no current path" in path_line(empty)


def test_output_rows_put_the_state_second_to_the_index_and_word_undescribed_outputs():
    o = OutputView(index=1, shape=[3, 4], dtype="float32", nbytes=48, address=0x7F00, state="invalid")
    assert output_row(o) == [1, "invalid", "[3, 4]", "float32", "48 B", "0x7f00", "", ""]
    bare = OutputView(index=0, shape=[], dtype="", nbytes=0, address=None, state="live")
    assert output_row(bare)[2] == "not recorded"


def test_the_page_uses_the_same_banner_and_path_words():
    trace = run_scenario("generations", "sim").trace
    data = page_data(trace)
    gens = [i for i, s in enumerate(trace.steps) if s.kind == "generation"]
    assert gens
    for i in gens:
        banner = data["banners"][data["steps"][i][4]]
        assert banner["head"] == generation_banner(trace.steps[i].generation, banner["items"])
    for i, step in enumerate(trace.steps):
        if step.snapshot is not None:
            assert data["snaps"][data["steps"][i][2]]["info"] == path_line(step.snapshot)


def test_the_cli_listing_counts_steps_from_one():
    trace = run_scenario("chain", "sim").trace
    lines = step_lines(trace.steps)
    assert lines[0].split()[0] == "1" and lines[0].endswith(headline(trace.steps[0]))
    assert len(lines) == 2 * len(trace.steps) and lines[1].strip() == f"why: {trace.steps[0].reason}"


def test_the_cell_summary_shows_only_counts_that_happened_and_fits_80_columns():
    trace = run_scenario("chain", "sim").trace
    activity = SimpleNamespace(
        label="tree 'x'", before=0, new=trace.calls, level="full", trace=trace, tree=None, new_trace=trace,
        counts=lambda: trace.counts(), reasons=lambda kind: {"a reason " * 12: 2} if kind == "eager" else {},
        now=trace.last_snapshot(),  # the summary reads where the tree is now from a snapshot alone
    )
    lines = cell_summary(activity)
    now = trace.last_snapshot()
    assert any(line.startswith(f"  now: generation {now.generation} · state {now.state} · path ") for line in lines)
    counts = lines[1]
    assert "recordings" in counts and "errors" not in counts and "eager" not in counts
    assert all(len(line) <= 80 for line in lines)
    assert any(line.startswith("  findings:") for line in lines)
    long = "  " + "word " * 30
    assert all(len(x) <= 80 for x in wrap(long)) and wrap(long)[1].startswith("    ")


def test_the_generation_banner_says_what_every_release_says():
    """With torch's trees the outputs invalidated at a generation may be older than the generation
    that ends (the whole path of a warming-up or recording path), and from 2.13 torch's error words
    a backward's output as a "gradient tensor output": the banner names the path, and quotes the
    end every release's message shares."""
    assert generation_banner(4, []) == "Generation 4 begins: nothing live was invalidated."
    one = generation_banner(4, ["output 0 of f (node 1)"])
    assert one.startswith("Generation 4 begins: 1 output still live on the path is now invalid.")
    assert "previous generation" not in one and "accessing tensor output" not in one
    assert one.endswith("\u201c\u2026 has been overwritten by a subsequent run\u201d.")
    assert "2 outputs still live on the path are now invalid. Using one raises" in generation_banner(5, ["a", "b"])
