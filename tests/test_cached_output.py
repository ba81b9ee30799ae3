"""The cuda backend's cached replay outputs (engine/cuda.py CachedOutput), on CPU tensors: an
output is live while anything beyond the cache holds a tensor, a view or the storage."""

import gc

import pytest
import torch

from cgviz.engine.cuda import CachedOutput


def cached(n_tensors: int = 1) -> CachedOutput:
    """As the backend builds one: tensors on a storage nothing else holds."""
    storage = torch.zeros(16).untyped_storage()
    tensors = [torch.empty(0).set_(storage, i, (4,), (1,)) for i in range(n_tensors)]
    del storage
    return CachedOutput(tensors)


def test_nothing_but_the_cache_holds_it():
    assert not cached().alive()
    assert not cached(3).alive()


@pytest.mark.parametrize("hold", ["tensor", "second tensor", "view", "storage", "view of a view"])
def test_anything_holding_the_output_keeps_it_live(hold):
    c = cached(2)
    t = c.tensors[1] if hold == "second tensor" else c.tensors[0]
    held = {"tensor": t, "second tensor": t, "view": t[1:], "storage": t.untyped_storage(),
            "view of a view": t[1:][1:]}[hold]
    del t
    assert c.alive()
    del held
    gc.collect()
    assert not c.alive()


def test_a_dropped_cache_follows_the_storage():
    c = cached()
    held = c.tensors[0][2:]
    c.drop()
    assert c.tensors is None and c.storage is None
    assert c.alive()  # the view keeps the storage
    del held
    assert not c.alive()


def test_the_liveness_test_asks_no_tensor_for_its_storage(monkeypatch):
    """The replay loop asks every call: the storage object the cache keeps answers, with no
    tensor asked for its storage (a handover of that object between torch and Python each time)."""
    c = cached(2)
    asked = []
    original = torch.Tensor.untyped_storage
    monkeypatch.setattr(torch.Tensor, "untyped_storage", lambda self: asked.append(1) or original(self))
    assert not c.alive()
    held = c.storage
    assert c.alive()
    del held
    assert not c.alive()
    assert asked == []
