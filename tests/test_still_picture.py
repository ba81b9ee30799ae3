"""The Explorer's still picture: where widgets do not run (nbconvert's HTML, GitHub, nbviewer,
the docs) a notebook shows the tree, the pool and the headline of the step the widget showed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers import ROOT, still_drawings

pytest.importorskip("anywidget")


def test_a_notebook_read_without_a_kernel_shows_the_explorers_step(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import cgviz\nfrom cgviz.data import surprise_trace\ncgviz.Explorer(surprise_trace('graph_break'), step=3)")]
    path = tmp_path / "still.ipynb"
    nbformat.write(nb, path)
    env = {"PYTHONPATH": str(ROOT), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    for args in (["--to", "notebook", "--execute", "--inplace", str(path)], ["--to", "html", str(path)]):
        done = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    outputs = nbformat.read(path, 4).cells[0].outputs
    # first the still picture, then the widget, which hides the picture where it runs
    assert list(outputs[0]["data"]) == ["text/html", "text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in outputs[1]["data"]
    still = outputs[0]["data"]["text/html"]
    assert "<b>step 4/27</b> · generation 2 begins" in still
    # the tree and the pool as images (JupyterLab's sanitizer keeps those, not inline SVG)
    tree, pool = still_drawings(still)
    assert "<svg" not in still and "<script" not in still
    assert tree.lstrip().startswith(("<?xml", "<svg")) and "gated_block [0/0] (inference)" in tree
    assert "Pool:" in pool
    page = (tmp_path / "still.html").read_text()
    assert "cgviz-still" in page and 'alt="the tree after step 4"' in page


def test_a_tree_too_large_for_a_still_picture_says_so_and_keeps_the_pool(monkeypatch):
    from cgviz.data import surprise_trace
    from cgviz.views import static_view

    trace = surprise_trace("graph_break")
    nodes = len(trace.steps[-1].snapshot.nodes)
    monkeypatch.setattr(static_view, "STILL_MAX_NODES", nodes - 1)
    still = static_view.static_html(trace, len(trace.steps) - 1)
    assert f"The tree has {nodes} nodes: too many for a still picture" in still
    (pool,) = still_drawings(still)  # the pool, without the tree
    assert "Pool:" in pool
