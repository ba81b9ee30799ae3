"""`import cgviz` is light: no widget, plotting or notebook library, and no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT

HEAVY = ("ipywidgets", "anywidget", "matplotlib", "graphviz", "IPython")

PROBE = f"""
import json, sys
import cgviz
after_import = sorted(m for m in {HEAVY!r} + ("torch",) if m in sys.modules)
tree = cgviz.Tree("sim")
print(json.dumps({{
    "after_import": after_import,
    "tree": type(tree).__name__,
    "trace": cgviz.Trace.__name__,
    "heavy_after_use": sorted(m for m in {HEAVY!r} if m in sys.modules),
}}))
"""


@pytest.fixture(scope="module")
def probe() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_cgviz_loads_no_widget_plotting_or_notebook_library(probe):
    assert [m for m in probe["after_import"] if m in HEAVY] == []


def test_import_cgviz_does_not_load_torch(probe):
    """cgviz/__init__.py promises it: torch loads on first use of an attribute (cgviz.Tree), not at
    `import cgviz`, which a notebook or the command line pays for before doing anything."""
    assert "torch" not in probe["after_import"]


def test_tree_and_trace_resolve_and_using_them_loads_no_view_library(probe):
    assert probe["tree"] == "Tree" and probe["trace"] == "Trace"
    assert probe["heavy_after_use"] == []


def test_unknown_attribute_raises_attribute_error():
    import cgviz

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cgviz.nope  # noqa: B018
