"""%%cudagraph --torch on a real torch.compile(mode="reduce-overhead") model, in an IPython shell."""

import contextlib
import io
import sys

import pytest
import torch

pytest.importorskip("IPython")

CELL_SETUP = """
import torch
torch.manual_seed(0)
model = torch.compile(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU()).cuda(), mode="reduce-overhead")
x = torch.randn(8, 32, device="cuda")
"""
CELL = """
with torch.no_grad():
    y = model(x)
"""


@pytest.fixture
def shell(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    saved_main, saved_hook = sys.modules.get("__main__"), sys.excepthook
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance(config=config, colors="nocolor")
    torch._dynamo.reset()
    try:
        assert sh.run_cell("%load_ext cgviz").success
        assert sh.run_cell(CELL_SETUP).success
        yield sh
    finally:
        InteractiveShell.clear_instance()
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        sys.excepthook = saved_hook
        torch._dynamo.reset()


def run_magic(sh, line, cell):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sh.run_cell_magic("cudagraph", line, cell)
    return out.getvalue()


def test_cudagraph_magic_with_torch_observes_the_compiled_model(shell):
    first = run_magic(shell, "-n 4 --torch --no-widget", CELL)
    print(first)
    assert "torch.compile (observed)" in first
    again = run_magic(shell, "-n 2 --torch --no-widget", CELL)
    print(again)
    assert "torch.compile (observed)" in again
    assert "replay" in again.lower()
