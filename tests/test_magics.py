"""The IPython extension, driven through a real IPython shell: `%load_ext cgviz`, the
`%%cudagraph` cell magic (its summary, its Explorer, --save, --mark-step, --tree, --torch,
errors in the cell, bad arguments) and `%cgviz status|explore|reset|save`.

Each test gets a fresh `InteractiveShell` (its history in memory, its profile in a temporary
IPYTHONDIR) and the process's default tree put aside, and every global the shell touches is
put back afterwards, so these tests run in the same pytest pass as the others.
"""

from __future__ import annotations

import atexit
import contextlib
import io as io_
import re
import sys

import pytest

pytest.importorskip("IPython")
pytest.importorskip("ipywidgets")

import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cgviz  # noqa: E402
from cgviz.engine import registry  # noqa: E402
from cgviz.trace import io  # noqa: E402
from cgviz.trace.model import Step, Trace  # noqa: E402

WIDGET = "application/vnd.jupyter.widget-view+json"
SETUP = """
import cgviz, torch
tree = cgviz.Tree("sim")
f = tree.wrap(lambda x: x * 2 + 1, name="f")
x = torch.ones(4)
"""
CELL = "y = f(x); del y"


# -- the shell ----------------------------------------------------------------------------------
@pytest.fixture
def shell(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    saved_main, saved_hook = sys.modules.get("__main__"), sys.excepthook
    saved_default, cgviz._default_tree = cgviz._default_tree, None
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance(config=config, colors="nocolor")
    try:
        with contextlib.redirect_stdout(io_.StringIO()):
            result = sh.run_cell("%load_ext cgviz")
        assert result.success
        yield sh
    finally:
        for explorer in getattr(sh.magics_manager.registry.get("CudaGraphMagics"), "explorers", []):
            explorer.close()
        with contextlib.suppress(Exception):
            atexit.unregister(sh.atexit_operations)
            sh.atexit_operations()
        InteractiveShell.clear_instance()
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        sys.excepthook = saved_hook
        cgviz._default_tree = saved_default


def magics(sh):
    return sh.magics_manager.registry["CudaGraphMagics"]


class Run:
    """What one cell printed and displayed."""

    def __init__(self, sh, code: str) -> None:
        from IPython.utils.capture import capture_output

        with capture_output() as cap:
            self.result = sh.run_cell(code)
        self.stdout, self.stderr, self.outputs = cap.stdout, cap.stderr, cap.outputs
        self.text = self.stdout + self.stderr
        self.magics = magics(sh)

    @property
    def widgets(self) -> list[str]:
        """model ids of the widgets displayed."""
        return [o.data[WIDGET]["model_id"] for o in self.outputs if WIDGET in o.data]


def cudagraph(sh, line: str, cell: str = CELL) -> Run:
    return Run(sh, f"%%cudagraph {line}\n{cell}")


COUNT_WORDS = (
    "warmups", "recordings", "replays", "eager fallbacks", "generations", "path ends", "errors", "checkpoint restores",
)


def printed_counts(text: str, label: str) -> dict[str, int]:
    """The counts the summary prints for the tree called `label` (it prints only those above 0)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(label))
    words = lines[start + 1].strip().split(" · ")
    return {w.rsplit(" ", 1)[0]: int(w.rsplit(" ", 1)[1]) for w in words}


def counts_line(text: str, label: str) -> dict[str, int]:
    """Every count for the tree called `label`: those printed, 0 for the others."""
    printed = printed_counts(text, label)
    assert all(printed.values()), f"a zero count was printed: {printed}"
    return {word: printed.get(word, 0) for word in COUNT_WORDS}


def flat(text: str) -> str:
    """`text` with line breaks and indents made single spaces (the summary wraps at 80 columns)."""
    return " ".join(text.split())


def kinds_of(trace) -> list[str]:
    return [s.kind for s in trace.expanded()]


def new_counts(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    words = {
        "warmup": "warmups", "record": "recordings", "execute": "replays", "eager": "eager fallbacks",
        "generation": "generations", "path_end": "path ends", "error": "errors",
        "checkpoint_restore": "checkpoint restores",
    }
    return {words[k]: after[k] - before[k] for k in words}


@pytest.fixture
def sim(shell):
    assert shell.run_cell(SETUP).success
    return shell


# -- loading ------------------------------------------------------------------------------------
def test_load_ext_registers_both_magics(shell):
    assert "cudagraph" in shell.magics_manager.magics["cell"]
    assert "cgviz" in shell.magics_manager.magics["line"]
    assert "cgviz" in shell.extension_manager.loaded


def test_help_prints_usage_and_options_without_running_the_cell(shell):
    run = cudagraph(shell, "-h", "ran = True")
    assert "usage: %%cudagraph" in run.stdout
    for option in ("-n N", "--mark-step", "--torch", "--tree NAME", "--save PATH", "--no-widget"):
        assert option in run.stdout
    assert "ran" not in shell.user_ns
    assert "Traceback" not in run.text and "error" not in run.text
    run = Run(shell, "%cgviz -h")
    assert "usage: %cgviz" in run.stdout and "save PATH [NAME]" in run.stdout


# -- %%cudagraph: the summary and the trace -----------------------------------------------------
def test_summary_counts_match_what_the_tree_did(sim):
    tree = sim.user_ns["tree"]
    run = cudagraph(sim, "-n 3")
    assert run.result.success
    assert "ran the cell 3 times" in run.stdout
    got = counts_line(run.stdout, "tree `tree` on sim")
    expected = new_counts({k: 0 for k in tree.trace.counts()}, tree.trace.counts())
    assert got == expected
    assert (got["warmups"], got["recordings"], got["replays"]) == (1, 1, 1)
    assert "pool:" in run.stdout and "reserved" in run.stdout and "allocated" in run.stdout
    assert f"{tree.trace.calls} in its trace" in run.stdout
    last = run.magics.last
    assert [a.tree for a in last.activities] == [tree]
    assert kinds_of(last.activities[0].new_trace) == kinds_of(tree.trace)


def test_summary_fits_80_columns_and_ends_with_the_findings(sim):
    assert sim.run_cell("scaled = tree.wrap(lambda x, n: x * n, name='scaled')").success
    run = cudagraph(sim, "-n 4", "out = scaled(torch.ones(3), 2)")
    lines = run.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert printed_counts(run.stdout, "tree `tree` on sim") == {"eager fallbacks": 4}  # only those above 0
    findings = next(i for i, line in enumerate(lines) if line.strip().startswith("findings:"))
    text = " ".join(line.strip() for line in lines[findings:])
    assert "1 error" in text and "no call of this run was replayed" in text and "%cgviz doctor" in text


def test_cgviz_doctor_prints_the_diagnosis(sim):
    cudagraph(sim, "-n 3")
    run = Run(sim, "%cgviz doctor tree")
    assert run.stdout.startswith("info: ") and "replayed a CUDA graph" in run.stdout
    assert "Traceback" not in run.text


def test_rerunning_the_cell_continues_the_trace(sim):
    tree = sim.user_ns["tree"]
    cudagraph(sim, "-n 3")
    before = tree.trace.counts()
    run = cudagraph(sim, "-n 3")
    got = counts_line(run.stdout, "tree `tree` on sim")
    assert got == new_counts(before, tree.trace.counts())
    assert (got["warmups"], got["recordings"], got["replays"]) == (0, 0, 3)
    assert tree.trace.counts()["execute"] == 4
    run = cudagraph(sim, "")
    assert counts_line(run.stdout, "tree `tree` on sim")["replays"] == 1
    assert tree.trace.counts()["execute"] == 5


def test_step_by_step_warmup_record_execute_by_rerunning(sim):
    kinds = []
    for _ in range(3):
        run = cudagraph(sim, "--no-widget")
        got = counts_line(run.stdout, "tree `tree` on sim")
        kinds.append(next(k for k in ("warmups", "recordings", "replays") if got[k]))
        assert run.widgets == []
    assert kinds == ["warmups", "recordings", "replays"]


def test_cell_variables_land_in_the_user_namespace(sim):
    cudagraph(sim, "-n 2", "y = f(x)\nz = y.sum().item()\ncount = globals().get('count', 0) + 1")
    assert sim.user_ns["count"] == 2
    assert sim.user_ns["z"] == 12.0
    assert torch.equal(sim.user_ns["y"], torch.full((4,), 3.0))


def test_only_the_last_run_displays_the_cell_value(sim):
    run = cudagraph(sim, "-n 3 --no-widget", "y = f(x); del y\n7 * 6")
    assert [line for line in run.stdout.splitlines() if line.startswith("Out[")] == ["Out[0]: 42"]


def test_eager_fallbacks_list_their_distinct_reasons(sim):
    sim.run_cell("h = tree.wrap(lambda x, scale=1: x * scale, name='h')")
    run = cudagraph(sim, "-n 3 --no-widget", "h(x, 2)\nh(x, scale=2)")
    got = counts_line(run.stdout, "tree `tree` on sim")
    assert got["eager fallbacks"] == 6
    reasons = {s.reason for s in sim.user_ns["tree"].trace.steps if s.kind == "eager"}
    assert len(reasons) == 2
    for reason in reasons:
        assert f"3× {flat(reason)}" in flat(run.stdout)
    assert "eager fallbacks:" in run.stdout


def test_no_tree_took_a_step(sim):
    run = cudagraph(sim, "", "a = 1")
    assert "no cgviz tree took a step" in run.stdout
    assert run.widgets == [] and run.magics.explorers == []
    sim.run_cell("quiet = cgviz.Tree('sim', trace=None)\nq = quiet.wrap(torch.neg)")
    run = cudagraph(sim, "", "r = q(x); del r")
    assert "no cgviz tree took a step" in run.stdout and "trace=None record no steps" in run.stdout


def test_a_tree_made_inside_the_cell_is_seen(shell):
    code = (
        "import cgviz, torch\nt = cgviz.Tree('sim', name='inner')\ng = t.wrap(torch.neg)\n"
        "r = g(torch.ones(2)); del r"
    )
    run = cudagraph(shell, "--no-widget", code)
    assert counts_line(run.stdout, "tree 'inner' on sim")["warmups"] == 1


def test_several_trees_each_get_a_summary_and_an_explorer(sim):
    sim.run_cell("other = cgviz.Tree('sim', name='other')\ng = other.wrap(lambda x: x - 1, name='g')")
    run = cudagraph(sim, "-n 2", "y = f(x); del y\nw = g(x); del w")
    assert counts_line(run.stdout, "tree `tree` on sim")["warmups"] == 1
    assert counts_line(run.stdout, "tree 'other' on sim")["warmups"] == 1
    assert len(run.magics.explorers) == 2 and len(run.widgets) == 2


def test_events_level_says_the_pool_is_not_recorded(shell):
    shell.run_cell("import cgviz, torch\nev = cgviz.Tree('sim', trace='events')\nh = ev.wrap(torch.neg)")
    run = cudagraph(shell, "--no-widget", "r = h(torch.ones(2)); del r")
    assert "pool: not recorded (trace='events'" in run.stdout


# -- the Explorer -------------------------------------------------------------------------------
def test_explorer_shows_the_new_steps(sim):
    from cgviz.widgets.explorer import Explorer

    tree = sim.user_ns["tree"]
    cudagraph(sim, "-n 3")
    run = cudagraph(sim, "-n 3")
    (explorer,) = run.magics.explorers
    assert isinstance(explorer, Explorer)
    assert run.widgets == [explorer.model_id]
    assert explorer.trace is run.magics.last.activities[0].new_trace
    assert kinds_of(explorer.trace) == ["path_end", "execute"] * 3
    assert kinds_of(tree.trace)[-6:] == kinds_of(explorer.trace)
    assert explorer.trace is not tree.trace and explorer.tree is None
    assert explorer.step == len(explorer.trace.steps) - 1
    assert explorer._head["rows"][-1][1] == explorer.trace.steps[-1].headline()


def test_explorer_with_tree_shows_the_whole_trace(sim):
    tree = sim.user_ns["tree"]
    cudagraph(sim, "-n 2")
    run = cudagraph(sim, "--tree tree")
    (explorer,) = run.magics.explorers
    assert run.widgets == [explorer.model_id]
    assert explorer.tree is None and kinds_of(explorer.trace) == kinds_of(tree.trace)
    assert [s.headline() for s in explorer.trace.steps] == [s.headline() for s in tree.trace.steps]
    assert explorer.step == len(tree.trace.steps) - 1
    assert explorer._head["rows"][-1][1] == tree.trace.steps[-1].headline()
    # a copy: later steps neither reach it nor pay for it
    listeners = list(tree._recorder.listeners)
    sim.run_cell("for _ in range(5):\n    y = f(x); del y")
    assert tree._recorder.listeners == listeners == []
    assert explorer._head["n"] == len(explorer.trace.steps)


def test_without_anywidget_the_page_is_shown_inline(sim, monkeypatch):
    monkeypatch.setitem(sys.modules, "cgviz.widgets.explorer", None)  # its import fails
    run = cudagraph(sim, "-n 2")
    assert run.widgets == [] and run.magics.explorers == []
    (page,) = [o.data for o in run.outputs if "text/html" in o.data]
    assert page["text/html"].startswith("<iframe srcdoc=") and "cgviz-data" in page["text/html"]
    assert page["text/plain"] == "cgviz explorer: 3 steps (1 warmup · 1 record · 1 path_end)"
    assert 'pip install "cgviz[notebook]"' in run.stdout


def test_no_widget_displays_nothing_but_still_prints(sim):
    run = cudagraph(sim, "-n 2 --no-widget")
    assert run.widgets == [] and run.magics.explorers == []
    assert "recordings 1" in run.stdout


# -- --save, --mark-step, --tree ----------------------------------------------------------------
def test_save_writes_a_trace_that_loads_back(sim, tmp_path):
    path = tmp_path / "run.cgtrace.json"
    run = cudagraph(sim, f"-n 3 --save {path}")
    assert f"to {path}" in run.stdout
    loaded = cgviz.Trace.load(path)
    tree = sim.user_ns["tree"]
    assert io.dumps(loaded) == io.dumps(tree.trace)
    assert [s.headline() for s in loaded.steps] == [s.headline() for s in tree.trace.steps]
    assert run.magics.last.saved == str(path)


def test_save_with_several_trees_asks_for_tree(sim, tmp_path):
    sim.run_cell("other = cgviz.Tree('sim', name='other')\ng = other.wrap(torch.neg)")
    path = tmp_path / "run.json"
    run = cudagraph(sim, f"--no-widget --save {path}", "y = f(x); del y\nw = g(x); del w")
    assert "name one with --tree" in run.stdout and not path.exists()
    run = cudagraph(sim, f"--no-widget --save {path} --tree other", "w = g(x); del w")
    assert io.dumps(cgviz.Trace.load(path)) == io.dumps(sim.user_ns["other"].trace)


def test_save_to_a_missing_directory_is_a_one_line_error(sim, tmp_path):
    run = cudagraph(sim, f"--no-widget --save {tmp_path}/missing/run.json")
    assert "could not save" in run.stderr and "Traceback" not in run.text
    assert "warmups 1" in run.stdout  # the cell ran, the summary is there


@pytest.mark.parametrize("quote", ['"', "'"])
def test_save_to_a_quoted_path_with_spaces_loads_back(sim, tmp_path, quote):
    other = "'" if quote == '"' else '"'
    path = tmp_path / "my runs" / f"a {other}quoted{other} run.cgtrace.json"
    path.parent.mkdir()
    run = cudagraph(sim, f"-n 3 --no-widget --save {quote}{path}{quote}")
    assert "error" not in run.stderr and f"to {path}" in run.stdout
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    assert io.dumps(cgviz.Trace.load(path)) == io.dumps(sim.user_ns["tree"].trace)
    assert run.magics.last.saved == str(path)


def test_quoted_tree_name_and_path_in_both_magics(sim, tmp_path):
    sim.run_cell("spaced = cgviz.Tree('sim', name='my tree')\ng = spaced.wrap(torch.neg)")
    first, second = tmp_path / "cell run.json", tmp_path / "line run.json"
    run = cudagraph(sim, f'--no-widget --tree "my tree" --save "{first}"', "w = g(x); del w")
    assert "error" not in run.stderr and run.magics.last.saved == str(first)
    run = Run(sim, f"%cgviz save '{second}' 'my tree'")
    assert "error" not in run.stderr and f"to {second}" in run.stdout
    trace = sim.user_ns["spaced"].trace
    assert io.dumps(cgviz.Trace.load(first)) == io.dumps(cgviz.Trace.load(second)) == io.dumps(trace)


def test_save_to_a_missing_directory_names_it(sim, tmp_path):
    missing = tmp_path / "no such dir"
    run = cudagraph(sim, f'--no-widget --save "{missing / "run.json"}"')
    errors = [ln for ln in run.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and f"directory {missing} does not exist" in errors[0]
    assert "Traceback" not in run.text and not missing.exists()
    (tmp_path / "a file").write_text("")
    run = Run(sim, f'%cgviz save "{tmp_path / "a file" / "run.json"}" tree')
    assert f"{tmp_path / 'a file'} is not a directory" in run.stderr and "Traceback" not in run.text


def test_mark_step_adds_generation_steps(sim):
    tree = sim.user_ns["tree"]
    run = cudagraph(sim, "-n 3 --mark-step --tree tree --no-widget", "y = f(x)")
    got = counts_line(run.stdout, "tree `tree` on sim")
    assert got["generations"] == 3 and tree.generation == 4
    assert (got["warmups"], got["recordings"], got["replays"]) == (1, 1, 1)
    kinds = [s.kind for s in tree.trace.expanded()]
    assert kinds.count("generation") == 3
    assert cgviz._default_tree is None  # --tree: the default tree is not made just to mark it


def test_mark_step_without_tree_marks_the_default_tree(shell):
    run = cudagraph(
        shell, "-n 2 --mark-step --no-widget",
        "import cgviz, torch\nif 'g' not in globals(): g = cgviz.graphed(torch.neg)\nr = g(torch.ones(2))",
    )
    got = counts_line(run.stdout, "tree 'default' on")
    assert got["generations"] == 2 and got["warmups"] == 1 and got["recordings"] == 1


def test_tree_by_name_or_variable(sim):
    sim.run_cell("named = cgviz.Tree('sim', name='mytree')")
    run = cudagraph(sim, "--tree mytree --no-widget", "a = 1")
    assert "tree 'mytree' on sim: 0 new steps" in run.stdout
    run = cudagraph(sim, "--tree tree --no-widget")
    assert "tree `tree` on sim: 1 new step" in run.stdout


# -- --torch --------------------------------------------------------------------------------------
def test_torch_without_observer_prints_a_note_and_runs(sim, monkeypatch):
    import cgviz.magics as m

    monkeypatch.setattr(m, "_observe_torch", lambda: None)
    run = cudagraph(sim, "--torch --no-widget")
    assert "--torch needs cgviz.observe_torch (not available in this version)" in run.stdout
    assert counts_line(run.stdout, "tree `tree` on sim")["warmups"] == 1


def test_torch_observer_trace_is_summed_up_and_sees_the_cell_error(sim, monkeypatch):
    import cgviz.magics as m

    seen = []

    @contextlib.contextmanager
    def fake_observe():
        trace = Trace(meta={"trace_level": "events", "backend": "torch.compile"})
        sim.user_ns["observed"] = trace
        try:
            yield trace
        except BaseException as exc:
            seen.append(exc)
            raise

    monkeypatch.setattr(m, "_observe_torch", lambda: fake_observe)
    cell = "observed.steps.append(Step(len(observed.steps), 'warmup', 'first call', 1, 'fn'))\nraise KeyError('k')"
    sim.user_ns["Step"] = Step
    run = cudagraph(sim, "--torch", cell)
    assert "torch.compile (observed): 1 new step" in run.stdout
    assert counts_line(run.stdout, "torch.compile (observed)")["warmups"] == 1
    assert [type(e) for e in seen] == [KeyError]
    assert len(run.magics.explorers) == 1


def test_cgviz_doctor_torch_diagnoses_the_observed_run(sim, monkeypatch):
    import cgviz.magics as m

    run = Run(sim, "%cgviz doctor torch")
    assert "no torch.compile run observed yet" in run.stderr and "Traceback" not in run.text

    @contextlib.contextmanager
    def fake_observe():
        trace = Trace(meta={"trace_level": "events", "backend": "torch.compile"})
        trace.steps += [Step(k, "warmup", "first call", 1, "fn") for k in range(3)]
        yield trace

    monkeypatch.setattr(m, "_observe_torch", lambda: fake_observe)
    cell = cudagraph(sim, "--torch --no-widget", "pass")
    torch_part = cell.stdout[cell.stdout.index("torch.compile (observed)"):]
    assert "%cgviz doctor torch" in torch_part
    run = Run(sim, "%cgviz doctor torch")
    expected = cgviz.diagnose(cell.magics.torch_trace).text()
    assert run.stdout.strip() == expected.strip() and "no call of this run was replayed" in expected


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's own, on importing torch._inductor
def test_torch_with_the_real_observer_runs_the_cell(sim):
    from cgviz.magics import _observe_torch

    if _observe_torch() is None:
        pytest.skip("this version has no cgviz.observe_torch")
    run = cudagraph(sim, "--torch --no-widget")
    assert "Traceback" not in run.text
    assert counts_line(run.stdout, "tree `tree` on sim")["warmups"] == 1
    assert "torch.compile (observed): 0 new steps" in run.stdout  # no torch.compile call in the cell


# -- errors -------------------------------------------------------------------------------------
def test_an_exception_in_the_cell_is_shown_and_earlier_steps_kept(sim):
    tree = sim.user_ns["tree"]
    cell = "k = globals().get('k', 0) + 1\ny = f(x); del y\nif k == 2:\n    1 / 0"
    run = cudagraph(sim, "-n 3", cell)
    assert "ZeroDivisionError" in run.stdout and "Traceback" in run.stdout
    assert "run 2 of 3 raised ZeroDivisionError" in run.stdout
    assert sim.user_ns["k"] == 2  # the third run did not start
    got = counts_line(run.stdout, "tree `tree` on sim")
    assert (got["warmups"], got["recordings"]) == (1, 1)
    assert tree.trace.counts()["record"] == 1
    assert len(run.magics.explorers) == 1


def test_an_exception_inside_a_tree_function_is_an_error_step(sim):
    sim.run_cell("def bad(x):\n    raise ValueError('boom')\ng = tree.wrap(bad, name='g')")
    run = cudagraph(sim, "--no-widget", "y = f(x); del y\ng(x)")
    assert "ValueError: boom" in run.stdout and "Traceback" in run.stdout
    got = counts_line(run.stdout, "tree `tree` on sim")
    assert got["errors"] == 1 and got["warmups"] == 1
    assert "1× g raised ValueError: boom" in run.stdout


def test_a_syntax_error_stops_at_the_first_run(sim):
    run = cudagraph(sim, "-n 3 --no-widget", "y = = 1")
    assert "SyntaxError" in run.stdout
    assert "run 1 of 3 raised SyntaxError" in run.stdout


@pytest.mark.parametrize(
    "line, message",
    [
        ("-n 0", "-n must be a positive number of runs, not 0"),
        ("-n -2", "-n must be a positive number of runs, not -2"),
        ("-n two", "argument -n: invalid int value: 'two'"),
        ("-n 1.5", "argument -n: invalid int value: '1.5'"),
        ("--bogus", "unrecognized arguments: --bogus"),
        ("-n", "argument -n: expected one argument"),
        ("--tree nope", "no cgviz tree named 'nope'"),
        ("--save", "argument --save: expected one argument"),
        ('--save "runs/my run.json', "cannot split the arguments (no closing quotation)"),
        ("--tree 'my tree", "cannot split the arguments (no closing quotation)"),
    ],
)
def test_bad_arguments_print_usage_and_one_error_line(sim, line, message):
    run = cudagraph(sim, line, "ran = True")
    assert "Traceback" not in run.text
    assert "usage: %%cudagraph" in run.stderr
    errors = [ln for ln in run.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and errors[0].startswith("%%cudagraph: error: ") and message in errors[0]
    assert "ran" not in sim.user_ns
    assert run.result.success


def test_unknown_tree_lists_the_known_ones(sim):
    sim.run_cell("named = cgviz.Tree('sim', name='mytree')")
    run = cudagraph(sim, "--tree nope")
    assert "known: 'mytree'" in run.stderr and "tree" in run.stderr


# -- %cgviz ---------------------------------------------------------------------------------------
def test_cgviz_status_prints_explain(sim):
    cudagraph(sim, "-n 3 --no-widget")
    tree = sim.user_ns["tree"]
    run = Run(sim, "%cgviz status tree")
    assert run.stdout.strip() == tree.explain().strip()
    run = Run(sim, "%cgviz")  # no default tree yet: the newest tree
    assert run.stdout.strip() == tree.explain().strip()
    default = cgviz.default_tree()
    run = Run(sim, "%cgviz status")
    assert run.stdout.strip() == default.explain().strip()
    run = Run(sim, "%cgviz status default")
    assert run.stdout.strip() == default.explain().strip()


def test_cgviz_reset(sim):
    cudagraph(sim, "-n 3 --no-widget")
    tree = sim.user_ns["tree"]
    assert len(tree.nodes) == 2
    run = Run(sim, "%cgviz reset tree")
    assert "reset tree `tree` on sim: 2 nodes" in run.stdout
    assert tree.nodes == [] and tree.trace.steps[-1].kind == "path_end"
    run = cudagraph(sim, "--no-widget")
    assert counts_line(run.stdout, "tree `tree` on sim")["warmups"] == 1


def test_cgviz_save(sim, tmp_path):
    cudagraph(sim, "-n 3 --no-widget")
    path = tmp_path / "t.json"
    run = Run(sim, f"%cgviz save {path} tree")
    assert f"to {path}" in run.stdout
    assert io.dumps(cgviz.Trace.load(path)) == io.dumps(sim.user_ns["tree"].trace)


def test_cgviz_explore_displays_a_live_explorer(sim):
    cudagraph(sim, "-n 3 --no-widget")
    tree = sim.user_ns["tree"]
    run = Run(sim, "%cgviz explore tree")
    (explorer,) = run.magics.explorers
    assert run.widgets == [explorer.model_id]
    assert explorer.tree is tree and explorer._head["n"] == explorer.step + 1 == len(tree.trace.steps)
    sim.run_cell("y = f(x); del y")
    assert explorer.step == len(tree.trace.steps) - 1 and explorer._sent_n == len(tree.trace.steps)


@pytest.mark.parametrize(
    "line, message",
    [
        ("bogus", "invalid choice: 'bogus'"),
        ("save", "save needs a PATH"),
        ("status nope", "no cgviz tree named 'nope'"),
        ("status tree extra", "takes at most one tree NAME"),
        ("explore --bad", "unrecognized arguments: --bad"),
        ("save 'my run.json", "cannot split the arguments (no closing quotation)"),
        ('status "my tree', "cannot split the arguments (no closing quotation)"),
    ],
)
def test_cgviz_bad_arguments(sim, line, message):
    run = Run(sim, f"%cgviz {line}")
    assert "Traceback" not in run.text and run.result.success
    assert "usage: %cgviz" in run.stderr
    errors = [ln for ln in run.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and errors[0].startswith("%cgviz: error: ") and message in errors[0]


# -- the pieces ---------------------------------------------------------------------------------
def test_registry_holds_trees_weakly_and_finds_them_by_name():
    import gc

    tree = cgviz.Tree("sim", name="registry-test")
    assert tree in registry.all_trees()
    assert registry.find("registry-test") is tree
    newer = cgviz.Tree("sim", name="registry-test")
    assert registry.find("registry-test") is newer
    del newer
    gc.collect()
    assert registry.find("registry-test") is tree
    assert registry.find("no-such-tree") is None
    del tree
    gc.collect()
    assert registry.find("registry-test") is None


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=60))
def test_tail_trace_holds_exactly_the_last_decisions(letters):
    from cgviz.trace.fold import MAX_SPAN, fold_repeats, step_key
    from cgviz.trace.fold import tail_trace

    kind_of = {"a": "warmup", "b": "record", "c": "execute", "d": "path_end"}
    trace = Trace(meta={"trace_level": "events"})
    keys: list = []
    for c in letters:
        trace.steps.append(Step(len(trace.steps), kind_of[c], f"reason {c}", 1, duration=1.0))
        keys.append(step_key(trace.steps[-1]))
        fold_repeats(trace.steps, keys)
    expanded = [(s.kind, s.reason) for s in trace.expanded()]
    stored = [(s.index, s.repeat, s.span, s.duration) for s in trace.steps]
    assert len(expanded) == trace.calls == len(letters)
    for n in range(len(expanded) + 1):
        sub = tail_trace(trace, n)
        assert sub.calls == n and len(sub.steps) <= min(n, len(trace.steps) + MAX_SPAN)
        assert [(s.kind, s.reason) for s in sub.expanded()] == expanded[len(expanded) - n :]
        assert [s.index for s in sub.steps] == list(range(len(sub.steps)))
        assert sum(s.duration for s in sub.steps) == pytest.approx(n)  # each decision took 1.0
        assert sub.meta == trace.meta
    assert [(s.index, s.repeat, s.span, s.duration) for s in trace.steps] == stored  # untouched


def test_import_cgviz_exposes_the_extension_lazily():
    assert callable(cgviz.load_ipython_extension)
    assert re.search(r"%load_ext cgviz", cgviz.load_ipython_extension.__doc__)
