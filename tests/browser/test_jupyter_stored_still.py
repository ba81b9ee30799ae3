"""A notebook opened in JupyterLab before it runs (cloned, or on Binder): its outputs are
untrusted, and JupyterLab shows their HTML through its sanitizer. The Explorer's still picture
stored there must still show its drawings, as images, and not the drawings' words as text (what
inline SVG became: the sanitizer strips the SVG elements and keeps their text)."""

from __future__ import annotations

from typing import Any

import nbformat

from conftest import shot

from cgviz.data import surprise_trace
from cgviz.views.static_view import static_html

# the still pictures of the open notebook: their images (loaded size) and their text
STILLS_JS = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .cgviz-still')].map((s) => ({
  images: [...s.querySelectorAll('img')].map((i) => [i.complete, i.naturalWidth, Math.round(i.getBoundingClientRect().width)]),
  svg: s.querySelectorAll('svg').length,
  text: s.textContent,
}))"""


def test_a_stored_still_picture_shows_its_drawings_before_the_notebook_runs(context: Any, jupyter: Any) -> None:
    trace = surprise_trace("graph_break")
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("cgviz.Explorer(trace, step=3)", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "text/html": static_html(trace, 3), "text/plain": "<cgviz.Explorer>"})]
    nb.cells = [cell]
    nbformat.write(nb, str(jupyter.root / "stored_still.ipynb"))  # unsigned: JupyterLab does not trust it

    page = context.new_page()
    page.goto(jupyter.page_url("/lab/tree/stored_still.ipynb?reset"))
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .cgviz-still img", timeout=60_000)
    page.wait_for_function("() => [...document.querySelectorAll('.cgviz-still img')].every((i) => i.complete)",
                           timeout=10_000)
    (still,) = page.evaluate(STILLS_JS)
    shot(page, "stored-still-untrusted")
    assert "step 4/27" in still["text"]
    assert len(still["images"]) == 2  # the tree and the pool
    assert all(done and natural > 0 and shown > 0 for done, natural, shown in still["images"]), still["images"]
    # none of a drawing's words stand in the page as text (the node names are in the tree's image)
    assert "gated_block [0/0] (inference)" not in still["text"] and "cgviz_tree" not in still["text"]
