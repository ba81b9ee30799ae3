"""The replay path's C++ signature check on CUDA tensors: it tells devices apart where the key
does, and a steady loop on real graphs builds no signature key."""

import torch

import cgviz
from cgviz.engine import _torch_compat as compat
from cgviz.engine import tree as tree_module
from cgviz.engine.function import signature_key

DEV = "cuda"


def test_the_check_tells_a_cuda_tensor_from_a_cpu_one_and_passes_its_twin():
    x = torch.zeros(16, device=DEV)
    check = compat.signature_guard((x,))
    assert check is not None
    assert check(torch.ones(16, device=DEV))
    for other in (torch.zeros(16), torch.zeros(16, device=DEV, dtype=torch.float16), torch.zeros(17, device=DEV),
                  torch.zeros(16, device=DEV, requires_grad=True)):
        assert not check(other)
        assert signature_key((other,)) != signature_key((x,))


def test_a_steady_loop_on_real_graphs_builds_no_signature_key(monkeypatch):
    keys = []
    monkeypatch.setattr(tree_module, "signature_key", lambda args: keys.append(1) or signature_key(args))
    tree = cgviz.Tree(DEV, trace=None)
    f = tree.wrap(lambda x: (x * 2 + 1).relu(), name="f")
    for _ in range(20):
        x = torch.randn(64, device=DEV)
        assert torch.equal(f(x), (x * 2 + 1).relu())
    assert keys == [1] and tree.nodes[-1].replays == 18
    y = f(torch.randn(64, device="cpu"))  # another device: the key is built, and it runs eagerly
    assert y.device.type == "cpu" and keys == [1, 1]
