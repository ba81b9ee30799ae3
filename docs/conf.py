"""Sphinx configuration of cgviz's documentation.

    make docs                                                # docs/_build/html/index.html
    sphinx-build -W --keep-going -b html docs docs/_build/html

Pages are Markdown (MyST). The pages with pictures are text notebooks (MyST-NB): their code
runs at every build on cgviz's CPU simulation, so every picture is drawn by the code beside
it. The teaching notebooks (``notebooks/*.ipynb``, stored without outputs) are copied into
``docs/notebooks/`` (a build-time folder, not kept in git) and executed the same way, in the
repository's ``notebooks/`` folder, as nbval runs them.

The build needs no network: no intersphinx, no scripts from a CDN. Jupyter widgets cannot be
shown on a static page without a widget manager fetched from a CDN, so the kernels of the
build show a ``cgviz.Explorer`` as the explorer's standalone page (the same front end,
``cgviz.to_html``) in an iframe: see ``_ext/kernel_startup.py``.
"""

from __future__ import annotations

import atexit
import filecmp
import os
import shutil
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
NOTEBOOKS = ROOT / "notebooks"  # the teaching notebooks, as stored
NOTEBOOK_COPIES = DOCS / "notebooks"  # their build-time copies (git ignores this folder)
NOTEBOOK_FILES = (".ipynb", ".png", ".svg", ".jpg", ".jpeg", ".gif")  # copied along: images they show

sys.path.insert(0, str(ROOT))  # autodoc documents this checkout's cgviz

import cgviz  # noqa: E402  (light: the engine loads on first use)

# -- project -------------------------------------------------------------------------------------
project = "cgviz"
author = "cgviz contributors"
copyright = "cgviz contributors"  # noqa: A001 - Sphinx's name
release = cgviz.__version__
version = release

extensions = [
    "myst_nb",  # Markdown pages, text notebooks and .ipynb files (brings myst_parser)
    "sphinx.ext.autodoc",
]
root_doc = "index"
exclude_patterns = ["_build", "_ext", "**/.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

# -- checks: a broken internal link or reference is a warning, and warnings fail the build (-W) --
nitpicky = True
# Signatures name things from outside cgviz (torch, typing, os, ...; bare names imported for type
# checking only) and modules the reference does not cover: no inventories are fetched (the build
# is offline), so those cannot link anywhere. References to cgviz's public names must resolve.
nitpick_ignore_regex = [
    (r"py:.*", r"(?!cgviz\.).*"),
    (r"py:.*", r"cgviz\.(engine|trace|views|widgets|observe)\..*"),
]
suppress_warnings = [
    # the notebooks toctree is a glob: the teaching notebooks come and go
    "toc.empty_glob",
]

# -- MyST ----------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [text](engine.md#a-heading) links to headings of levels 1-3

# -- executing notebooks -------------------------------------------------------------------------
nb_execution_mode = "force"  # every build runs every page's code: pictures follow the code
nb_execution_timeout = 180  # seconds per cell
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_in_temp = False
nb_merge_streams = True
# Offline: no widget manager from a CDN. A widget's own view cannot be shown on a static page;
# drop it, so what else the output carries (HTML, text) is shown instead.
nb_ipywidgets_js: dict = {}
nb_mime_priority_overrides = [
    ("html", "application/vnd.jupyter.widget-view+json", None),
    ("html", "application/vnd.jupyter.widget-state+json", None),
]

# -- autodoc -------------------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# docstrings use Markdown's `code`: render single backquotes as code, not as titles
default_role = "literal"


def class_signature(app, what, name, obj, options, signature, return_annotation):
    """A class's signature from its own ``__init__``, its annotations evaluated: autodoc takes
    ``(*args, **kwargs)`` from a ``__new__`` that traitlets gives the Explorer, and leaves the
    annotations of a class signature as strings (``'Optional[str]'``) under
    ``from __future__ import annotations``."""
    from sphinx.util.inspect import signature as signature_of, stringify_signature

    if what != "class" or "__init__" not in vars(obj):
        return None
    sig = signature_of(obj.__init__, bound_method=True)
    return stringify_signature(sig, show_return_annotation=False), None


# -- HTML ----------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"cgviz {release}"
html_static_path = ["_static"]
html_css_files = ["cgviz-docs.css"]
html_show_sourcelink = False


# -- the teaching notebooks ----------------------------------------------------------------------
def sync_notebooks(src: Path = NOTEBOOKS, dst: Path = NOTEBOOK_COPIES) -> list[str]:
    """Copy the notebooks (and images beside them) into the build-time folder; remove copies of
    notebooks that are gone. Unchanged files are left alone, so Sphinx sees them unchanged."""
    wanted = {}
    if src.is_dir():
        for path in sorted(src.rglob("*")):
            rel = path.relative_to(src)
            if path.is_file() and path.suffix.lower() in NOTEBOOK_FILES and ".ipynb_checkpoints" not in rel.parts:
                wanted[rel] = path
    dst.mkdir(exist_ok=True)
    for path in sorted(dst.rglob("*"), reverse=True):
        rel = path.relative_to(dst)
        if path.is_file() and rel not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    for rel, path in wanted.items():
        target = dst / rel
        if not (target.is_file() and filecmp.cmp(path, target, shallow=False)):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return [str(rel) for rel in wanted if rel.suffix == ".ipynb"]


def kernel_startup_dir() -> Path:
    """An IPython folder for the kernels this build starts: its one startup file shows a
    ``cgviz.Explorer`` as the standalone page, and runs notebook copies in ``notebooks/``."""
    ipython_dir = Path(tempfile.mkdtemp(prefix="cgviz-docs-ipython-"))
    atexit.register(shutil.rmtree, ipython_dir, ignore_errors=True)
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True)
    shutil.copy(DOCS / "_ext" / "kernel_startup.py", startup / "50-cgviz-docs.py")
    return ipython_dir


def setup(app):
    app.connect("autodoc-process-signature", class_signature)


sync_notebooks()
os.environ["IPYTHONDIR"] = str(kernel_startup_dir())
os.environ["CGVIZ_DOCS_NOTEBOOK_DIRS"] = os.pathsep.join([str(NOTEBOOK_COPIES), str(NOTEBOOKS)])
os.environ.pop("MPLBACKEND", None)  # kernels draw figures inline, as in Jupyter (Agg would show none)
