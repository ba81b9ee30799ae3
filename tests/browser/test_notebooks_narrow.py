"""The teaching notebooks read without a kernel (nbconvert's HTML of what is stored, as nbviewer
shows them) in Chromium, in a window 850 pixels wide and in one of 1280: every picture in an
output fits its output area, drawn smaller where needed, none cut off at the right.

nbconvert shows an `image/svg+xml` output as an image at the size the SVG declares (no rule of its
page confines it), while an image inside an HTML output is confined to the output's width: the
notebooks show their drawings that way (`svg_image`: the Explorer's still pictures, and the
notebooks' own `show` and `picture`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import pictures_past_their_area, shot

nbconvert = pytest.importorskip("nbconvert")
nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
WIDTHS = (850, 1280)

@pytest.fixture(scope="module")
def pages(tmp_path_factory: Any) -> dict[str, Path]:
    """Each notebook as nbconvert's HTML of its stored outputs (nothing runs)."""
    folder = tmp_path_factory.mktemp("notebooks-html")
    out = {}
    for path in NOTEBOOKS:
        html, _ = nbconvert.HTMLExporter().from_notebook_node(nbformat.read(path, 4))
        out[path.stem] = folder / f"{path.stem}.html"
        out[path.stem].write_text(html, encoding="utf-8")
    return out


def test_there_are_pictures_to_check(pages: dict[str, Path]) -> None:
    assert len(pages) >= 7
    assert sum(p.read_text(encoding="utf-8").count("data:image/svg+xml") for p in pages.values()) >= 20


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", [p.stem for p in NOTEBOOKS])
def test_every_picture_fits_its_output_area(browser: Any, pages: dict[str, Path], name: str, width: int) -> None:
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.goto(pages[name].as_uri())
        page.wait_for_load_state("load")
        assert page.locator(".jp-OutputArea-output").count() > 0
        wide = pictures_past_their_area(page, ".jp-OutputArea-output")
        if wide:
            page.locator(".jp-OutputArea-output svg, .jp-OutputArea-output img").first.scroll_into_view_if_needed()
            shot(page, f"{name}-{width}-too-wide")
        assert not wide, f"{name} at {width} px: pictures cut off (picture px, output area px): {wide}"
    finally:
        context.close()
