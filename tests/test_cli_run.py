"""`cgviz run script.py` / `cgviz run -m module` and `cgviz --version`, in real subprocesses
(`python -m cgviz ...`) on programs written into tmp_path. CPU only: nothing is recorded, and the
summary says why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cgviz
from helpers import ROOT

TIMEOUT = 300

PROGRAM = """\
import sys
import torch

print("argv", sys.argv[1:])
print("sum", torch.arange(4.0).sum().item())
print("path0", sys.path[0])
"""


def cgviz_run(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    environ["PYTHONPATH"] = str(ROOT)
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "cgviz", *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=TIMEOUT)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def loaded(path: Path) -> cgviz.Trace:
    assert path.is_file(), f"no trace at {path}"
    return cgviz.Trace.load(path)


def test_a_cpu_program_runs_unchanged_and_its_trace_is_saved(tmp_path):
    write(tmp_path / "prog.py", PROGRAM)
    proc = cgviz_run(tmp_path, "run", "prog.py", "--lr", "3", "--no-summary")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["argv ['--lr', '3', '--no-summary']", "sum 6.0", f"path0 {tmp_path}"]
    trace = loaded(tmp_path / "cgviz-run.cgtrace.json")
    assert trace.steps == []
    assert "cgviz-run.cgtrace.json" in proc.stderr and "nothing was called through a tree" in proc.stderr
    # no CUDA here, or (on a GPU machine) no reduce-overhead call: the summary says which, in one line
    assert ("no CUDA" in proc.stderr) or ("made no call through torch.compile" in proc.stderr)


def test_run_options_before_the_script_and_no_summary(tmp_path):
    write(tmp_path / "prog.py", PROGRAM)
    proc = cgviz_run(tmp_path, "run", "--no-summary", "--trace-out", "out/t.cgtrace.json", "prog.py")
    assert proc.returncode == 2 and "out" in proc.stderr  # the folder out/ does not exist: refused
    (tmp_path / "out").mkdir()
    proc = cgviz_run(tmp_path, "run", "--no-summary", "--trace-out", "out/t.cgtrace.json", "prog.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    loaded(tmp_path / "out" / "t.cgtrace.json")


def test_a_module_runs_with_dash_m(tmp_path):
    write(tmp_path / "pkg" / "__init__.py", "")
    write(tmp_path / "pkg" / "tool.py", "import sys\nprint('tool', __name__, sys.argv[1:])\n")
    proc = cgviz_run(tmp_path, "run", "-m", "pkg.tool", "--epochs", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "tool __main__ ['--epochs', '2']"
    loaded(tmp_path / "cgviz-run.cgtrace.json")


def test_an_exception_keeps_its_traceback_and_the_trace_is_saved(tmp_path):
    write(tmp_path / "bad.py", "x = 1\nraise ValueError('the program broke')\n")
    proc = cgviz_run(tmp_path, "run", "bad.py")
    assert proc.returncode == 1
    err = proc.stderr
    assert "Traceback (most recent call last):" in err
    assert 'bad.py", line 2, in <module>' in err and "ValueError: the program broke" in err
    assert err.rstrip().endswith("ValueError: the program broke")  # the traceback comes last, as Python ends
    assert "runpy" not in err and "cgviz/run.py" not in err  # it starts in the program
    loaded(tmp_path / "cgviz-run.cgtrace.json")


@pytest.mark.parametrize("body, code", [("import sys\nsys.exit(3)\n", 3), ("raise KeyboardInterrupt\n", 130),
                                        ("import sys\nsys.exit(0)\n", 0)])
def test_exit_status_and_interrupt(tmp_path, body, code):
    write(tmp_path / "prog.py", body)
    proc = cgviz_run(tmp_path, "run", "prog.py")
    assert proc.returncode == code, proc.stderr
    loaded(tmp_path / "cgviz-run.cgtrace.json")
    if code == 130:
        assert "KeyboardInterrupt" in proc.stderr


def test_html_and_level_events(tmp_path):
    write(tmp_path / "prog.py", PROGRAM)
    proc = cgviz_run(tmp_path, "run", "--level", "events", "--html", "page.html", "--trace-out", "t.json", "prog.py")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "page.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert "page.html" in proc.stderr
    assert loaded(tmp_path / "t.json").meta["trace_level"] == "events"


PROBLEMS = [
    (["run", "missing.py"], "no such file: missing.py"),
    (["run", "adir"], "adir is a directory"),
    (["run", "-m", "no_such_module_here"], "no_such_module_here"),
    (["run", "-m"], "-m needs a module"),
    (["run"], "give a program to run"),
    (["run", "--trace-out", "nowhere/t.cgtrace.json", "prog.py"], "nowhere"),
    (["run", "--html", "nowhere/p.html", "prog.py"], "nowhere"),
]


@pytest.mark.parametrize("args, said", PROBLEMS, ids=[" ".join(a) for a, _ in PROBLEMS])
def test_problems_before_the_program_starts(tmp_path, args, said):
    (tmp_path / "adir").mkdir()
    write(tmp_path / "prog.py", "open('ran', 'w').close()\n")
    proc = cgviz_run(tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cgviz run: ") and said in lines[0], proc.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "cgviz-run.cgtrace.json").exists()


def test_each_rank_writes_its_own_trace(tmp_path):
    write(tmp_path / "prog.py", PROGRAM)
    proc = cgviz_run(tmp_path, "run", "prog.py", env={"RANK": "1", "WORLD_SIZE": "2"})
    assert proc.returncode == 0, proc.stderr
    trace = loaded(tmp_path / "cgviz-run-1.cgtrace.json")
    assert trace.meta["rank"] == 1 and trace.meta["world_size"] == 2
    assert "cgviz merge" not in proc.stderr and "rank 1" in proc.stderr
    proc = cgviz_run(tmp_path, "run", "prog.py", env={"RANK": "0", "WORLD_SIZE": "2"})
    assert proc.returncode == 0, proc.stderr
    assert loaded(tmp_path / "cgviz-run-0.cgtrace.json").meta["rank"] == 0
    assert "cgviz merge cgviz-run-*.cgtrace.json -o all.cgtrace.json" in proc.stderr


def test_a_rank_placeholder_without_a_rank_is_refused(tmp_path):
    write(tmp_path / "prog.py", "open('ran', 'w').close()\n")
    proc = cgviz_run(tmp_path, "run", "--trace-out", "r-{rank}.json", "prog.py")
    assert proc.returncode == 2 and "{rank}" in proc.stderr
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("module", ["cgviz", "cgviz.cli"])
def test_version(tmp_path, module):
    proc = subprocess.run([sys.executable, "-m", module, "--version"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"cgviz {cgviz.__version__}"


def test_saving_failure_is_said_and_the_program_status_kept(tmp_path):
    # the program removes the folder its trace was to go to: the trace goes to the temporary folder instead
    write(tmp_path / "out" / ".keep", "")
    write(tmp_path / "prog.py", "import shutil, sys\nshutil.rmtree('out')\nsys.exit(4)\n")
    proc = cgviz_run(tmp_path, "run", "--trace-out", "out/t.cgtrace.json", "prog.py")
    assert proc.returncode == 4
    assert "could not save the trace to out/t.cgtrace.json" in proc.stderr
    fallback = next(line for line in proc.stderr.splitlines() if "was saved to" in line).split("saved to ")[1]
    fallback = fallback.split(" instead")[0]
    try:
        loaded(Path(fallback))
    finally:
        Path(fallback).unlink(missing_ok=True)


BREAKING = """\
import torch


def scale(x):
    y = x * 2
    if y.sum().item() > 0:
        return y + 1
    return y


compiled = torch.compile(scale, backend="eager")
for _ in range(3):
    compiled(torch.ones(4))
print("done")
"""


def test_a_graph_break_decided_while_compiling_is_in_the_trace_and_the_summary(tmp_path):
    """Nothing reaches a CUDA graph tree here, but dynamo's decision does: the summary says the
    function runs as two graphs, and at which line of the program."""
    write(tmp_path / "breaks.py", BREAKING)
    proc = cgviz_run(tmp_path, "run", "breaks.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    (step,) = loaded(tmp_path / "cgviz-run.cgtrace.json").steps
    assert step.kind == "compile" and "breaks.py:6 in scale" in step.reason
    assert "warning: scale runs as 2 graphs with Python between them: a graph break at breaks.py:6" in proc.stderr


def test_sigterm_saves_the_trace_and_ends_as_a_terminated_program(tmp_path):
    """torchrun stops the other ranks with SIGTERM: each still saves what it recorded."""
    import signal

    write(tmp_path / "waits.py", "import time\nprint('ready', flush=True)\ntime.sleep(120)\n")
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    environ["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "cgviz", "run", "waits.py"], cwd=tmp_path, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "cgviz-run.cgtrace.json" in err
    assert loaded(tmp_path / "cgviz-run.cgtrace.json").steps == []
