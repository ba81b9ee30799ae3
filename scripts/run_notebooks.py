"""Run the teaching notebooks and store what a reader without a kernel should see.

    python scripts/run_notebooks.py [notebooks/NN_name.ipynb ...]   (default: all of notebooks/)

Each notebook runs top to bottom in its own folder (as nbval and Jupyter run it). Its outputs
are kept, so that GitHub and nbviewer show the pictures and each Explorer's still picture;
except under exercise answers (cells whose outputs are hidden), which stay empty until the
reader runs them. Nothing that changes from run to run without meaning is kept: no widget state,
no execution timing. (nbval needs the execution counts: a cell with outputs has run.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 900
WIDGET = "application/vnd.jupyter.widget-view+json"


def hidden_answer(cell: nbformat.NotebookNode) -> bool:
    """An exercise answer: its outputs are hidden until the reader opens it."""
    jupyter = cell.metadata.get("jupyter", {})
    return bool(jupyter.get("outputs_hidden")) or "hide-cell" in cell.metadata.get("tags", [])


def run(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                   store_widget_state=False).execute()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)
        # a widget needs its kernel: the reader without one sees the still picture shown before it
        cell.outputs = [] if hidden_answer(cell) else [o for o in cell.outputs if WIDGET not in o.get("data", {})]
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in paths:
        print(f"running {path.name}", flush=True)
        run(path.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
