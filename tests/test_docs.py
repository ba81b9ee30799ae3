"""The documentation site builds, offline, with no warning (`make docs` runs the same build;
the `docs_site` fixture, in conftest.py, builds it once for these tests and the browser's).

Warnings are errors (-W): a broken internal link or cross-reference, a docstring that is not
valid reStructuredText, a page or notebook whose code fails. The pages' code and the teaching
notebooks run on the CPU simulation.
"""

from __future__ import annotations

import re

from helpers import ROOT

DOCS = ROOT / "docs"


def test_docs_build_without_warnings(docs_site):
    """The build had no warning (the fixture fails on one: a broken link, a page in no toctree, a
    failing cell), and every Markdown page of docs/ became a page of the site."""
    pages = sorted(p.stem for p in DOCS.glob("*.md"))
    assert "index" in pages and len(pages) > 1
    assert [p for p in pages if not (docs_site / f"{p}.html").is_file()] == []


def test_docs_pictures_are_drawn(docs_site):
    concepts = (docs_site / "concepts.html").read_text(encoding="utf-8")
    pictures = re.findall(r'<img[^>]+src="(_images/[^"]+\.svg)"', concepts)
    assert len(pictures) >= 10, "the concepts page lost its pictures"
    assert all((docs_site / p).is_file() for p in pictures)
    assert 'class="cgviz-explorer"' in concepts, "the Explorer is not shown on the concepts page"


def test_docs_api_reference(docs_site):
    api = (docs_site / "api.html").read_text(encoding="utf-8")
    for name in ("cgviz.Tree", "cgviz.Trace", "cgviz.Explorer", "cgviz.graphed", "cgviz.default_tree",
                 "cgviz.to_html", "cgviz.observe_torch", "cgviz.diagnose"):
        assert f'id="{name}"' in api, f"{name} is missing from the API reference"


def test_docs_notebooks_are_pages(docs_site):
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    for name in notebooks:
        assert (docs_site / "notebooks" / f"{name}.html").is_file(), f"notebooks/{name}.ipynb has no page"


def test_docs_load_nothing_from_the_network(docs_site):
    external = re.compile(r'<(?:script|link|iframe|img)\b[^>]*\b(?:src|href)="(?:https?:)?//', re.I)
    for page in docs_site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        hit = external.search(text)
        assert hit is None, f"{page.relative_to(docs_site)} loads {hit.group(0)!r} from the network"


def test_docs_show_every_explorer_as_a_page(docs_site):
    # A widget cannot run on a static page: the build's kernels show each Explorer as the exported
    # page (docs/_ext/kernel_startup.py). Its text form on a page means one slipped through.
    for page in docs_site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "&lt;cgviz.Explorer of" not in text, f"{page.relative_to(docs_site)} shows an Explorer as text"

