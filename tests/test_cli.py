"""The `cgviz` command: demo (text and HTML), info and saving a trace run in subprocesses (started
together, so the file stays quick); usage errors run in-process through cgviz.cli.main.
`cgviz render` and the demo's default page are tested in tests/test_html.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from cgviz.cli import main
from helpers import ROOT

HAVE_IO = importlib.util.find_spec("cgviz.trace.io") is not None


class Run:
    """A `python -m cgviz.cli ARGS` subprocess, started at once and awaited on first use."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cgviz.cli", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
        )
        self._out = None

    def result(self) -> tuple[int, str, str]:
        if self._out is None:
            stdout, stderr = self.proc.communicate(timeout=180)
            self._out = (self.proc.returncode, stdout, stderr)
        return self._out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "chain.cgtrace.json"
    # one demo run also saves its trace, once cgviz/trace/io.py exists, and its page (not in the checkout)
    save = ["-o", str(path)] if HAVE_IO else []
    page = ["-o", str(path.with_name("chain.html"))]
    started = {
        "demo": Run("demo", "--backend", "sim", "--text", "--scenario", "chain", *save, *page),
        "info": Run("info"),
    }
    yield started, path
    for run in started.values():
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


def test_demo_chain_prints_steps_reasons_and_the_tree(runs):
    rc, out, err = runs[0]["demo"].result()
    assert rc == 0, err
    assert "Linear chain" in out and "backend sim" in out
    assert "roots" in out and "node 3" in out and "node 5" in out
    assert "record g → node 4" in out
    assert "why: no child for g under node 3" in out  # the reasons are shown
    assert "all results equal eager" in out
    assert err == ""


def test_demo_writes_the_html_explorer_where_asked(runs):
    rc, out, err = runs[0]["demo"].result()
    page = runs[1].with_name("chain.html")
    assert rc == 0, err
    assert f"explorer written to {page}" in out
    assert "record g → node 4" in page.read_text(encoding="utf-8")


def test_info_lists_versions_and_backends(runs):
    rc, out, err = runs[0]["info"].result()
    assert rc == 0, err
    assert "cgviz " in out and "torch " in out
    assert "sim   available" in out
    assert "begin_allocate_to_pool" in out
    assert "signature check on replay" in out and "TensorGuards (C++)" in out


@pytest.mark.skipif(not HAVE_IO, reason="cgviz/trace/io.py is not there yet")
def test_demo_saves_a_trace_that_loads(runs):
    rc, out, err = runs[0]["demo"].result()
    import cgviz

    path = runs[1]
    assert rc == 0, err
    assert f"trace saved to {path}" in out
    trace = cgviz.Trace.load(path)
    assert trace.meta["scenario"] == "chain" and trace.meta["backend"] == "sim"
    kinds = [s.kind for s in trace.expanded()]
    assert kinds.count("record") == 3 and kinds.count("execute") == 6
    assert trace.steps[-1].snapshot is not None


def test_demo_with_an_unknown_scenario_exits_2_naming_the_choices(capsys):
    assert main(["demo", "--backend", "sim", "--scenario", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown scenario 'nope'" in err and "chain" in err and "branching" in err


def test_the_demo_offers_every_scenario_by_its_name(capsys):
    """The parser names the scenarios without importing them (that imports torch): the names it
    offers are the scenarios there are, in their order."""
    from cgviz.cli import SCENARIO_NAMES
    from cgviz.scenarios import SCENARIOS

    assert SCENARIO_NAMES == tuple(SCENARIOS)
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "one of: " + ", ".join(SCENARIOS) in " ".join(capsys.readouterr().out.split())


def test_commands_on_a_saved_trace_start_without_importing_torch(runs):
    """Reading, checking, exporting and merging a saved trace need no torch: a command that
    only reads one must not wait a second or two for it to import."""
    _, path = runs
    runs[0]["demo"].result()
    commands = [["--version"], ["doctor", str(path)], ["info", str(path)], ["export", str(path), "-o", "{out}.json"],
                ["merge", str(path), "-o", "{out}.merged.json"], ["render", str(path), "-o", "{out}.html"]]
    code = ("import sys\nfrom cgviz.cli import main\ntry:\n    rc = main(sys.argv[1:])\nexcept SystemExit as exc:\n"
            "    rc = exc.code\nprint(rc, 'torch' in sys.modules)")
    for i, argv in enumerate(commands):
        argv = [a.replace("{out}", str(path.with_name(f"out{i}"))) for a in argv]
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=180,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.stdout.split()[-2:] == ["0", "False"], (argv, proc.stdout[-500:], proc.stderr[-2000:])


@pytest.mark.parametrize("argv", [[], ["demo", "--backend", "tpu"], ["bogus"]])
def test_bad_command_lines_are_usage_errors(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "usage" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_demo_on_cuda_without_cuda_exits_1_with_a_clear_message(capsys):
    assert main(["demo", "--backend", "cuda", "--scenario", "chain"]) == 1
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "sim" in err


# -- the progress bar ----------------------------------------------------------------------------
class _Stream:
    def __init__(self, tty: bool) -> None:
        self.text, self.tty = "", tty

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.tty


def test_progress_bar_waits_a_second_then_rewrites_one_line_on_a_terminal():
    from cgviz.cli import ProgressBar

    now = [0.0]
    out = _Stream(tty=True)
    bar = ProgressBar(out, clock=lambda: now[0])
    bar(10, 10_000, "steps")
    assert out.text == ""  # under a second: nothing
    now[0] = 1.5
    bar(4000, 10_000, "steps")
    now[0] = 1.55
    bar(4001, 10_000, "steps")  # within 0.1 s of the last update: skipped
    now[0] = 2.0
    bar(10_000, 10_000, "steps")
    bar(1001, 1001, "trees")  # the end of a phase is always shown
    bar.close()
    assert out.text == ("\rbuilding page: 4,000/10,000 steps (40%)\rbuilding page: 10,000/10,000 steps (100%)"
                        "\rdrawing trees: 1,001/1,001 trees (100%)  \n")


def test_progress_bar_writes_lines_to_a_log_and_nothing_for_quick_work():
    from cgviz.cli import ProgressBar

    now = [0.0]
    log = _Stream(tty=False)
    bar = ProgressBar(log, clock=lambda: now[0])
    bar(5, 5, "steps")
    bar.close()
    assert log.text == ""
    now[0] = 2.0
    bar(1, 5, "steps")  # a log hears nothing for 5 s
    now[0] = 6.0
    bar(1, 5, "steps")
    now[0] = 7.0
    bar(2, 5, "steps")  # then a line at most every 5 s
    bar(5, 5, "steps")
    bar.close()
    assert log.text == "building page: 1/5 steps (20%)\nbuilding page: 5/5 steps (100%)\n"
