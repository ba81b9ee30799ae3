"""Fixtures shared by the test modules. Being here, this folder is on sys.path for every test
module, tests/gpu/ included, so they import tests/helpers.py and tests/random_workloads.py."""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings

import cgviz
from cgviz.scenarios import SCENARIOS, run_scenario

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
    it makes (the observer finds the managers torch holds). torch's container table is put back
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
