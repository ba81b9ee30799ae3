"""scripts/test_releases.py, the suite under each torch release: what it would run (--dry-run,
nothing installed), and its refusal of a release it does not know."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "test_releases.py"


def script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_a_release_gets_its_own_venv_its_torch_and_the_suite(tmp_path):
    done = script("--dry-run", "--venvs", str(tmp_path), "2.12.1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    venv = tmp_path / "2.12.1"
    assert lines[0].endswith(f"-m venv {venv}")
    assert lines[1] == f"{venv}/bin/python -m pip install -q torch==2.12.1"
    assert lines[2].startswith(f"{venv}/bin/python -m pip install -q -e ") and lines[2].endswith("[test,browser]")
    assert lines[3] == f"{venv}/bin/python -m pytest -q -p no:cacheprovider tests"
    assert len(lines) == 4


def test_a_venv_made_before_is_used_again(tmp_path):
    python = tmp_path / "2.14.1" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    done = script("--dry-run", "--venvs", str(tmp_path), "2.14.1")
    assert done.returncode == 0, done.stderr
    assert not any(" -m venv " in line for line in done.stdout.splitlines())
    assert done.stdout.splitlines()[0] == f"{python} -m pip install -q torch==2.14.1"


def test_the_default_releases_are_those_make_test_does_not_run(tmp_path):
    done = script("--dry-run", "--venvs", str(tmp_path))
    installs = [line.rsplit("==", 1)[1] for line in done.stdout.splitlines() if "torch==" in line]
    assert installs == ["2.11.0", "2.12.1", "2.14.1"]


def test_a_release_it_does_not_support_is_refused_by_name(tmp_path):
    for wrong in ("2.10.0", "2.12", "latest"):
        done = script("--dry-run", "--venvs", str(tmp_path), "2.12.1", wrong)
        assert done.returncode == 2
        assert f"not a torch release cgviz supports: {wrong}" in done.stderr
        assert not (tmp_path / "2.12.1").exists()
