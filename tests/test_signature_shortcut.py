"""The replay path's shortcut: a call is first checked, in C++, against the input signature of
the function's latest call; only when that fails is the signature key built and looked up.
It must decide exactly as the key does, hold no tensor, and be taken in a steady loop."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import re
import weakref

import pytest
import torch

import cgviz
from cgviz.engine import _torch_compat as compat
from cgviz.engine import tree as tree_module
from cgviz.engine.function import signature_key
from cgviz.scenarios import SCENARIOS, run_scenario


class Sub(torch.Tensor):
    pass


def _inputs() -> dict[str, torch.Tensor]:
    base = torch.arange(32, dtype=torch.float32)
    return {
        "f32[16]": torch.zeros(16),
        "f32[16] again": torch.ones(16),
        "f32[17]": torch.zeros(17),
        "f32[16] strided": base[::2],
        "f32[16] offset": base[16:],
        "f32[4,4]": torch.zeros(4, 4),
        "f32[4,4].t()": torch.zeros(4, 4).t(),
        "f64[16]": torch.zeros(16, dtype=torch.float64),
        "i64[16]": torch.zeros(16, dtype=torch.int64),
        "f32[16] requires_grad": torch.zeros(16, requires_grad=True),
        "parameter": torch.nn.Parameter(torch.zeros(16)),
        "subclass": torch.zeros(16).as_subclass(Sub),
        "f32[] scalar": torch.tensor(1.0),
        "f32[0]": torch.zeros(0),
        "meta f32[16]": torch.zeros(16, device="meta"),
        "sparse": torch.zeros(16).to_sparse(),
    }


def _key(t):
    return signature_key((t,))


def test_the_check_passes_only_where_the_signature_key_is_equal():
    inputs = _inputs()
    checks = {name: compat.signature_guard((t,)) for name, t in inputs.items() if _key(t) is not None}
    assert all(check is not None for check in checks.values()), "torch's TensorGuards could not be built"
    for (a, check), (b, t) in itertools.product(checks.items(), inputs.items()):
        if check(t):
            assert _key(t) == _key(inputs[a]), (a, b)
    # and it does pass for a plain tensor of the same signature, so the shortcut is taken
    assert checks["f32[16]"](inputs["f32[16] again"]) and checks["f32[16] strided"](torch.arange(32.0)[1::2])


def test_the_check_takes_several_inputs_and_says_no_to_other_kinds():
    x, y = torch.zeros(3), torch.zeros(2, 2, dtype=torch.float64)
    check = compat.signature_guard((x, y))
    assert check(torch.ones(3), torch.ones(2, 2, dtype=torch.float64))
    assert not check(y, x)
    assert not check(torch.ones(3), 2.0)
    with pytest.raises(TypeError):
        check(x)  # another number of inputs: the tree compares the count first


def test_the_check_holds_no_tensor():
    x = torch.zeros(16)
    ref = weakref.ref(x)
    storage = weakref.ref(x.untyped_storage())
    check = compat.signature_guard((x,))
    del x
    gc.collect()
    assert ref() is None and storage() is None
    assert check(torch.ones(16))


@pytest.fixture
def key_calls(monkeypatch):
    calls = []

    def counted(args):
        calls.append(len(args))
        return signature_key(args)

    monkeypatch.setattr(tree_module, "signature_key", counted)
    return calls


def test_a_steady_loop_builds_no_signature_key(key_calls):
    tree = cgviz.Tree("sim", trace=None)
    f = tree.wrap(lambda x: x * 2, name="f")
    x = torch.ones(4)
    for _ in range(3):
        f(x)
    assert key_calls == [1]  # the first call only
    for _ in range(10):
        f(torch.full((4,), 3.0))
    assert key_calls == [1]
    assert tree.nodes[-1].replays == 11


def test_without_the_check_every_call_builds_the_key(key_calls, monkeypatch):
    monkeypatch.setattr(compat, "signature_guard", lambda tensors: None)
    tree = cgviz.Tree("sim", trace=None)
    f = tree.wrap(lambda x: x * 2, name="f")
    for _ in range(5):
        assert torch.equal(f(torch.ones(4)), torch.full((4,), 2.0))
    assert key_calls == [1] * 5 and tree.nodes[-1].replays == 3


def test_alternating_signatures_and_counts_find_their_own_variants(key_calls):
    tree = cgviz.Tree("sim", trace="events")
    f = tree.wrap(lambda *xs: sum(x.sum() for x in xs) if xs else torch.zeros(()), name="f")
    calls = [(torch.ones(4),), (torch.ones(5),), (torch.ones(4), torch.ones(4)), (), (torch.ones(4, requires_grad=True),)]
    with torch.no_grad():
        for args in calls * 4:
            assert f(*args).item() == sum(a.sum().item() for a in args)
    assert len(tree.functions["f"].variants) == 5
    # a call repeating the latest signature is checked in C++: only changes build the key
    for _ in range(3):
        f(torch.ones(5))
    assert len(key_calls) == len(calls) * 4 + 1


def _without_addresses(value):
    """Host addresses differ between two runs in one process: compare all else."""
    if isinstance(value, dict):
        return {k: _without_addresses(v) for k, v in value.items() if "address" not in k}
    if isinstance(value, list):
        return [_without_addresses(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"0x[0-9a-f]+", "0x…", value)
    return value


def _steps(trace):
    return [_without_addresses(dataclasses.asdict(dataclasses.replace(s, duration=0.0, start=None)))
            for s in trace.steps]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_decides_the_same_without_the_check(name, monkeypatch):
    with_check = run_scenario(name, "sim")
    monkeypatch.setattr(compat, "signature_guard", lambda tensors: None)
    without = run_scenario(name, "sim")
    assert with_check.mismatches == without.mismatches == []
    assert _steps(with_check.trace) == _steps(without.trace)
