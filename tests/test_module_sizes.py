"""Modules stay small enough to read in one sitting: none of cgviz's Python or JavaScript sources
is over 600 lines (a module that grows past it has more than one job; split it by job)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cgviz"
MOST_LINES = 600


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".js") and "__pycache__" not in p.parts)


def test_no_module_is_over_600_lines():
    long = {p.relative_to(PACKAGE).as_posix(): n for p in sources()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MOST_LINES}
    assert long == {}, f"modules over {MOST_LINES} lines: {long}"


def test_the_size_check_reads_the_python_and_the_page_sources():
    names = {p.relative_to(PACKAGE).as_posix() for p in sources()}
    assert {"engine/tree.py", "observe/_torch_layout/manager.py", "views/page/explorer.js"} <= names
