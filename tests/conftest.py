"""Fixtures shared by the test modules. Being here, this folder is on sys.path for every test
module, tests/gpu/ included, so they import tests/helpers.py and tests/random_workloads.py."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time

import pytest
import torch
from hypothesis import settings

import cgviz
from cgviz.scenarios import SCENARIOS, run_scenario
from helpers import ROOT

# Property tests draw the same inputs on every run (and remember no failures between runs): a
# test passes or fails by the code, not by the draw.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")


@pytest.fixture
def tree():
    """A fresh tree on the sim backend: the engine's decisions, on any machine."""
    return cgviz.Tree("sim")


@pytest.fixture(params=["sim", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request) -> str:
    """The backend of a test that must decide the same on both: sim everywhere, cuda where there
    is a CUDA device (skipped elsewhere)."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return request.param


@pytest.fixture(scope="module")
def scenario_traces() -> dict:
    """Each scenario's trace, run on sim once per module (a module may change its traces)."""
    return {name: run_scenario(name, "sim").trace for name in SCENARIOS}


@pytest.fixture
def hold_manager():
    """hold_manager(manager): torch's device-0 container holds `manager`, as it holds the manager
    it makes (a test can then let go of it as torch does). torch's container table is put back
    afterwards."""
    from torch._inductor import cudagraph_trees as trees

    table = trees.get_obj(trees.local, "tree_manager_containers")
    saved = dict(table)

    def hold(manager):
        trees.get_container(0).tree_manager = manager
        return manager

    yield hold
    table.clear()
    table.update(saved)


DOCS_NEEDS = {"sphinx": "sphinx", "myst_nb": "myst-nb", "furo": "furo"}


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory):
    """The documentation site built once, offline, warnings as errors (as `make docs`): its html
    folder. Skips where the docs' packages are missing; fails, with the warnings and the log's
    end, where the build warns or fails."""
    missing = [pkg for module, pkg in DOCS_NEEDS.items() if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f"the docs build needs {', '.join(missing)}: pip install -e '.[docs]' (make setup does)")
    out = tmp_path_factory.mktemp("docs")
    # pages read (their notebooks run) in up to four processes: 87 s on two cores become 54 s
    jobs = str(min(4, os.cpu_count() or 1))
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-T", "-j", jobs, "-b", "html",
           "-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - started
    log = proc.stdout + proc.stderr
    problems = [line for line in log.splitlines() if re.search(r"(^|: )(WARNING|ERROR|CRITICAL):", line)]
    if proc.returncode != 0 or problems:
        # the warnings, then the end of the log: a failing cell's code and traceback (-T) are there
        pytest.fail(f"sphinx-build failed ({proc.returncode}) after {seconds:.0f} s:\n" + "\n".join(problems)
                    + "\n\n... end of the log:\n" + log[-8000:])
    print(f"docs built in {seconds:.0f} s")
    return out / "html"
