"""A function the tree runs eagerly because it needs the host says where: the user's own line
(the innermost frame outside torch and cgviz), as torch's skip messages do."""

from __future__ import annotations

import torch

import cgviz
from helpers import line_of


def branches(x):
    y = x * 2
    if y.sum().item() > 0:  # the host reads a value
        return y + 1
    return y


def masks(x):
    return x[x > 0]  # the output's shape depends on the data


def called_from_a_helper(x):
    return branches(x) * 3


def eager_reasons(fn) -> list[str]:
    tree = cgviz.Tree("sim")
    f = tree.wrap(fn, name="f")
    for _ in range(3):
        f(torch.ones(4))
    return [s.reason for s in tree.trace.steps if s.kind == "eager"]


def test_a_host_sync_names_the_users_line_and_its_text():
    why = eager_reasons(branches)[0]
    line = line_of(branches, ".item()")
    assert "aten::_local_scalar_dense at " in why and f"test_host_sync_source.py:{line} in branches" in why
    assert "(if y.sum().item() > 0:" in why


def test_a_data_dependent_shape_names_the_users_line():
    why = eager_reasons(masks)[0]
    assert f"test_host_sync_source.py:{line_of(masks, 'x[x > 0]')} in masks" in why


def test_the_innermost_users_frame_is_named_not_the_wrapped_functions():
    why = eager_reasons(called_from_a_helper)[0]
    assert f"test_host_sync_source.py:{line_of(branches, '.item()')} in branches" in why
    assert "torch/" not in why and "cgviz/" not in why


def test_a_llama_forward_recorded_on_a_gpu_names_the_transformers_line():
    """A Hugging Face Llama forward in a cgviz.Tree on an H200 (tests/gpu/test_host_sync_llama.py):
    the first finding says why nothing replayed and where the host read a value."""
    from pathlib import Path

    from cgviz.trace.diagnose import finding_record, user_source

    trace = cgviz.Trace.load(Path(__file__).parent / "data" / "llama_host_sync.cgtrace.json")
    assert "NVIDIA" in trace.meta["device"]
    first = finding_record(cgviz.diagnose(trace).findings[0])
    assert first["kind"] == "graphed" and first["severity"] == "error"
    assert "copies device memory to the host (aten::_local_scalar_dense" in first["cause"]
    assert first["source"] == user_source(next(s.reason for s in trace.steps if s.kind == "eager"))
    assert first["source"]["file"].startswith("transformers/") and first["source"]["line"] > 0
    assert ".item()" in first["fix"]
