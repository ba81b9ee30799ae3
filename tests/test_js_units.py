"""The front end's unit tests (tests/js: payload decoding, the state at a step, the step list's rows,
the ask planner) run under Node, so that pytest alone covers them too; skipped where Node is absent
(`make system-deps` installs Debian's nodejs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent / "js"


def test_the_front_ends_unit_tests_pass_under_node() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node not found: the front end's unit tests need it (apt install nodejs)")
    done = subprocess.run([node, "--test", str(TESTS)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# pass" in done.stdout and "# fail 0" in done.stdout, done.stdout[-2000:]
