"""The teaching notebooks as a reader without a kernel sees them (GitHub, nbviewer): rendered by
nbconvert from what is stored, no kernel and no widget. Every Explorer shows its still picture
(the tree at its step), exercise answers stay closed, and no machine's path is in them.
scripts/run_notebooks.py stores the outputs; nbval checks the marked ones still match."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from helpers import still_drawings

nbconvert = pytest.importorskip("nbconvert")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
EXPLORER = re.compile(r"\b(?:cgviz\.)?Explorer\(|\bexplore\(")


def explorer_cells(nb) -> list:
    """Cells that show an Explorer (not an exercise answer's: those stay closed)."""
    return [c for c in nb.cells if c.cell_type == "code" and EXPLORER.search(c.source)
            and not c.metadata.get("jupyter", {}).get("outputs_hidden")]


def test_there_are_notebooks_with_explorers():
    assert len(NOTEBOOKS) >= 7
    assert sum(len(explorer_cells(nbformat.read(p, 4))) for p in NOTEBOOKS) >= 7


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_reader_without_a_kernel_sees_every_explorers_tree(path):
    nb = nbformat.read(path, 4)
    for cell in explorer_cells(nb):
        still = [o["data"]["text/html"] for o in cell.get("outputs", []) if "text/html" in o.get("data", {})
                 and "cgviz-still" in o["data"]["text/html"]]
        assert still, f"{path.name}: an Explorer cell has no still picture stored:\n{cell.source}"
        # the tree at its step, or for a trace of CUDA graphs outside the trees, their list
        assert (still_drawings(still[0]) or 'class="cg-gl"' in still[0]) and re.search(r"<b>step \d+/\d+</b>", still[0])
        assert not [o for o in cell.outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    page, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    assert page.count("cgviz-still") >= len(explorer_cells(nb))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_answers_stay_closed_and_no_machine_path_is_stored(path):
    nb = nbformat.read(path, 4)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("jupyter", {}).get("outputs_hidden"):
            assert cell.outputs == [], f"{path.name}: an answer's output is stored:\n{cell.source}"
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"/(?:work|root|home|tmp)/", text)
    assert "application/vnd.jupyter.widget-state+json" not in text
