"""Reading the kernels of the graphs torch records (the GPU side is tests/gpu/test_observe_kernels.py):
torch's CUDAGraph class is stood in for only while a node records, and put back however that ends."""

from __future__ import annotations

import pytest
import torch

from cgviz._torch.graphs import inspectable_graph_class
from cgviz.observe import recorded_kernels
from cgviz.observe._hooks import graph_kernels
from cgviz.observe.observer import TorchObserver


def test_graphs_kept_stands_in_for_cudagraph_and_puts_it_back():
    original = torch.cuda.CUDAGraph
    with recorded_kernels.graphs_kept():
        assert torch.cuda.CUDAGraph is inspectable_graph_class()
        assert issubclass(torch.cuda.CUDAGraph, original)  # isinstance checks in torch still hold
    assert torch.cuda.CUDAGraph is original


def test_graphs_kept_puts_it_back_when_recording_raises():
    original = torch.cuda.CUDAGraph
    with pytest.raises(RuntimeError, match="boom"):
        with recorded_kernels.graphs_kept():
            raise RuntimeError("boom")
    assert torch.cuda.CUDAGraph is original


def test_kernels_are_read_at_full_unless_turned_off():
    assert TorchObserver("full").read_kernels is True
    assert TorchObserver("events").read_kernels is False
    assert TorchObserver("events", kernels=True).read_kernels is True
    assert TorchObserver("full", kernels=False).read_kernels is False
    with pytest.raises(TypeError, match="kernels must be True, False or None"):
        TorchObserver("full", kernels="yes")


def test_a_graph_that_kept_nothing_gives_no_kernels():
    class Forgetful:
        def debug_dump(self, path):
            raise RuntimeError("no graph kept")

    assert graph_kernels(None) is None
    assert graph_kernels(Forgetful()) is None
