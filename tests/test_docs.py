"""The documentation site builds, offline, with no warning (`make docs` runs the same build).

Warnings are errors (-W): a broken internal link or cross-reference, a docstring that is not
valid reStructuredText, a page or notebook whose code fails. The pages' code and the teaching
notebooks run on the CPU simulation.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import ROOT

DOCS = ROOT / "docs"
NEEDS = {"sphinx": "sphinx", "myst_nb": "myst-nb", "furo": "furo"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    missing = [pkg for module, pkg in NEEDS.items() if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f"the docs build needs {', '.join(missing)}: pip install -e '.[docs]' (make setup does)")
    out = tmp_path_factory.mktemp("docs")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-T", "-b", "html",
           "-d", str(out / "doctrees"), str(DOCS), str(out / "html")]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - started
    log = proc.stdout + proc.stderr
    problems = [line for line in log.splitlines() if re.search(r"(^|: )(WARNING|ERROR|CRITICAL):", line)]
    if proc.returncode != 0 or problems:
        # the warnings, then the end of the log: a failing cell's code and traceback (-T) are there
        pytest.fail(f"sphinx-build failed ({proc.returncode}) after {seconds:.0f} s:\n" + "\n".join(problems)
                    + "\n\n... end of the log:\n" + log[-8000:])
    print(f"docs built in {seconds:.0f} s")
    return out / "html"


def test_docs_build_without_warnings(site):
    """The build had no warning (the fixture fails on one: a broken link, a page in no toctree, a
    failing cell), and every Markdown page of docs/ became a page of the site."""
    pages = sorted(p.stem for p in DOCS.glob("*.md"))
    assert "index" in pages and len(pages) > 1
    assert [p for p in pages if not (site / f"{p}.html").is_file()] == []


def test_docs_pictures_are_drawn(site):
    concepts = (site / "concepts.html").read_text(encoding="utf-8")
    pictures = re.findall(r'<img[^>]+src="(_images/[^"]+\.svg)"', concepts)
    assert len(pictures) >= 10, "the concepts page lost its pictures"
    assert all((site / p).is_file() for p in pictures)
    assert 'class="cgviz-explorer"' in concepts, "the Explorer is not shown on the concepts page"


def test_docs_api_reference(site):
    api = (site / "api.html").read_text(encoding="utf-8")
    for name in ("cgviz.Tree", "cgviz.Trace", "cgviz.Explorer", "cgviz.graphed", "cgviz.default_tree",
                 "cgviz.to_html", "cgviz.observe_torch", "cgviz.diagnose"):
        assert f'id="{name}"' in api, f"{name} is missing from the API reference"


def test_docs_notebooks_are_pages(site):
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    for name in notebooks:
        assert (site / "notebooks" / f"{name}.html").is_file(), f"notebooks/{name}.ipynb has no page"


def test_docs_load_nothing_from_the_network(site):
    external = re.compile(r'<(?:script|link|iframe|img)\b[^>]*\b(?:src|href)="(?:https?:)?//', re.I)
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        hit = external.search(text)
        assert hit is None, f"{page.relative_to(site)} loads {hit.group(0)!r} from the network"


def test_docs_show_every_explorer_as_a_page(site):
    # A widget cannot run on a static page: the build's kernels show each Explorer as the exported
    # page (docs/_ext/kernel_startup.py). Its text form on a page means one slipped through.
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "&lt;cgviz.Explorer of" not in text, f"{page.relative_to(site)} shows an Explorer as text"


# each picture of a cell's output that reaches past the output's right edge: (width, output width)
TOO_WIDE_JS = """() => [...document.querySelectorAll('div.cell_output svg, div.cell_output img')]
  .filter((pic) => !pic.parentElement.closest('svg'))
  .map((pic) => [pic.getBoundingClientRect(), pic.closest('div.cell_output').getBoundingClientRect()])
  .filter(([box, area]) => box.width > 0 && box.right > area.right + 1)
  .map(([box, area]) => [Math.round(box.width), Math.round(area.width)])"""


def test_docs_notebook_pictures_fit_the_text_column(site):
    """In a window 850 pixels wide, every picture of a notebook's page (an image, or an SVG inline
    in an HTML output) is drawn within the text column, none cut off at the page's edge."""
    chromium = "/usr/bin/chromium"
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make setup installs it)")
    if not Path(chromium).exists():
        pytest.skip(f"Chromium not found at {chromium} (make setup installs Debian's chromium)")
    pages = sorted((site / "notebooks").glob("*.html"))
    assert pages
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 850, "height": 900})
            pictures, wide = 0, {}
            for path in pages:
                page.goto(path.as_uri())
                pictures += page.locator("div.cell_output svg, div.cell_output img").count()
                found = page.evaluate(TOO_WIDE_JS)
                if found:
                    wide[path.name] = found
        finally:
            browser.close()
    assert pictures >= 20
    assert not wide, f"pictures wider than the text column (picture px, column px): {wide}"
