"""Rewrite the table of docs/finds.md from the shipped corpus traces: one row per program of
examples/surprises, with the doctor's first error or warning and its fix, word for word.

    python scripts/finds_table.py      (tests/test_surprises.py checks the page is current)
"""

from __future__ import annotations

import re
from pathlib import Path

import cgviz
from cgviz.data import surprise_trace

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "finds.md"
HEADER = "|---|---|---|---|---|"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def rows() -> list[str]:
    out = []
    for program in sorted((ROOT / "examples" / "surprises").glob("*.py")):
        doc = program.read_text(encoding="utf-8").split('"""')[1]
        title = doc.strip().splitlines()[0]
        url = re.search(r"https://github.com/\S+", doc)[0].rstrip(").,")
        short = url.split("github.com/")[1].replace("/issues/", "#").replace("/pull/", "#")
        first = next(f for f in cgviz.diagnose(surprise_trace(program.stem)) if f.severity in ("error", "warning"))
        out.append(f"| `{program.name}` | [{short}]({url}) | {_cell(title)} | {first.severity}: {_cell(first.title)} "
                   f"| {_cell(first.suggestion)} |")
    return out


def main() -> None:
    lines = [line for line in PAGE.read_text(encoding="utf-8").splitlines() if not line.startswith("| `")]
    at = lines.index(HEADER) + 1
    lines[at:at] = rows()
    PAGE.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
