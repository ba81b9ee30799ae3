"""The documentation site's notebook pages in Chromium, in a window 850 pixels wide: every
picture of a cell's output (an image, or an SVG inline in an HTML output) is drawn within the
text column, none running past it (docs/_static/cgviz-docs.css confines both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import pictures_past_their_area


def test_docs_notebook_pictures_fit_the_text_column(browser: Any, docs_site: Path) -> None:
    pages = sorted((docs_site / "notebooks").glob("*.html"))
    assert len(pages) >= 7
    context = browser.new_context(viewport={"width": 850, "height": 900})
    try:
        page = context.new_page()
        pictures, wide = 0, {}
        for path in pages:
            page.goto(path.as_uri())
            pictures += page.locator("div.cell_output svg, div.cell_output img").count()
            found = pictures_past_their_area(page, "div.cell_output")
            if found:
                wide[path.name] = found
    finally:
        context.close()
    assert pictures >= 20
    assert not wide, f"pictures wider than the text column (picture px, column px): {wide}"
