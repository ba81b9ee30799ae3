"""GPU tests skip without CUDA. CGVIZ_TEST_CUDA_DEVICE=1 runs them with cuda:1 current (DEV =
"cuda" is then cuda:1 for the engine and for torch's own manager alike), to check a tree on a
device other than the first."""

import gc
import os

import pytest
import torch


def pytest_configure(config):
    index = os.environ.get("CGVIZ_TEST_CUDA_DEVICE")
    if index and torch.cuda.is_available():
        if not index.isdigit() or int(index) >= torch.cuda.device_count():
            raise pytest.UsageError(f"CGVIZ_TEST_CUDA_DEVICE={index!r}: this machine has "
                                    f"{torch.cuda.device_count()} CUDA device(s), numbered from 0")
        torch.cuda.set_device(int(index))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "tests/gpu" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)


@pytest.fixture
def fresh_dynamo():
    """Each test compiles from scratch, with empty trees and torch's skip counters at 0 (a trace
    notes the skips torch made before observing began); what a failed test left behind is freed
    before the next. The torch.compile modules use it with pytest.mark.usefixtures."""
    torch._dynamo.reset()  # also torch._inductor.cudagraph_trees.reset_cudagraph_trees()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
