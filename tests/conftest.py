"""Fixtures shared by the test modules. Being here, this folder is on sys.path for every test
module, tests/gpu/ included, so they import tests/helpers.py and tests/random_workloads.py."""

from __future__ import annotations

import pytest
import torch

import cgviz
from cgviz.scenarios import SCENARIOS, run_scenario


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
