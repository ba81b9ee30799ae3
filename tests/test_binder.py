"""Binder's environment: what binder/ lists, installed into a fresh virtual environment, runs the
notebook that the Binder link opens (notebooks/01_why_cuda_graphs.ipynb).

Binder (repo2docker) installs binder/apt.txt with apt and then binder/requirements.txt with pip,
from the repository's root. Here a new venv gets binder/requirements.txt the same way. Where
download.pytorch.org (the CPU wheel index the requirements name) cannot be reached, torch is
installed as the Makefile installs it, `pip install torch==$(TORCH_VERSION)` (a CPU wheel where
pip finds one locally), and the rest of the requirements after it.

The venv (about 1.5 GB, most of it torch) is made in /dev/shm where it has room: writing and
deleting it there takes seconds, on a disk it can take minutes. pip's cache is used, and
nothing is byte-compiled at install (--no-compile): the notebook's imports compile what they use.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import ROOT

BINDER = ROOT / "binder"
NOTEBOOK = ROOT / "notebooks" / "01_why_cuda_graphs.ipynb"
TORCH_INDEX_HOST = "download.pytorch.org"
SHM = Path("/dev/shm")
SHM_ROOM = 6 << 30  # bytes free in /dev/shm to put the venv there

# Runs in the new venv: executes the notebook in its own folder, as Jupyter does, then one more
# cell that reports where the kernel's Python and cgviz come from.
RUN_NOTEBOOK = textwrap.dedent(
    """
    import json, sys
    import nbformat
    from nbclient import NotebookClient

    path, cwd = sys.argv[1], sys.argv[2]
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import sys, json, cgviz, torch\\n"
        "print(json.dumps({'prefix': sys.prefix, 'cgviz': cgviz.__file__, 'torch': torch.__version__}))"
    ))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
    print(nb.cells[-1].outputs[-1]["text"].strip().splitlines()[-1])
    """
)


def torch_version_of_makefile() -> str:
    match = re.search(r"^TORCH_VERSION\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert match, "the Makefile names no TORCH_VERSION"
    return match.group(1)


def torch_index_reachable(timeout: float = 10.0) -> bool:
    try:
        urllib.request.urlopen(f"https://{TORCH_INDEX_HOST}/whl/cpu/", timeout=timeout).close()
        return True
    except Exception:  # noqa: BLE001 - no network, no DNS, a proxy refusing: not reachable
        return False


def requirements_without_torch(text: str) -> str:
    """The requirements less the torch line and the options naming PyTorch's index."""
    kept = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words and (TORCH_INDEX_HOST in line or re.fullmatch(r"torch\b.*", words[0])):
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


@contextlib.contextmanager
def venv_folder(tmp_path: Path):
    """Where to make the venv: a folder in /dev/shm (removed after) when it has room, else tmp_path."""
    try:
        stat = os.statvfs(SHM)
        room = stat.f_bavail * stat.f_frsize if os.access(SHM, os.W_OK) else 0
    except OSError:
        room = 0
    if room < SHM_ROOM:
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="cgviz-binder-", dir=SHM))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(cmd: list[str], env: dict, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def test_binder_files():
    requirements = (BINDER / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in requirements
    assert re.search(r"^torch\s*$", requirements, re.M), "binder/requirements.txt must install torch (the CPU build)"
    assert re.search(r"^jupyterlab\b", requirements, re.M)
    assert re.search(r"^(-e )?\.\[notebook\]\s*$", requirements, re.M), "the package with its notebook extra"
    assert "graphviz" in (BINDER / "apt.txt").read_text().split()
    readme = (ROOT / "README.md").read_text()
    assert "https://mybinder.org/v2/gh/cgviz/cgviz/main?urlpath=lab/tree/notebooks/01_why_cuda_graphs.ipynb" in readme


def test_requirements_without_torch():
    text = "# c\n--extra-index-url https://download.pytorch.org/whl/cpu\ntorch\ntorchvision\njupyterlab>=4\n-e .[notebook]\n"
    assert requirements_without_torch(text) == "# c\ntorchvision\njupyterlab>=4\n-e .[notebook]\n"


def test_binder_environment_runs_the_first_notebook(tmp_path):
    if not NOTEBOOK.exists():
        pytest.skip(f"{NOTEBOOK.relative_to(ROOT)} does not exist yet: nothing for Binder to open")
    with venv_folder(tmp_path) as folder:
        started = time.perf_counter()
        venv = folder / "venv"
        python = make_venv_from_binder(venv, tmp_path)
        installed = time.perf_counter()
        script = tmp_path / "run_notebook.py"
        script.write_text(RUN_NOTEBOOK)
        env = venv_env(venv, tmp_path)
        proc = run([str(python), str(script), str(NOTEBOOK), str(NOTEBOOK.parent)], env, NOTEBOOK.parent, 900)
        where = proc.stdout.strip().splitlines()[-1]
        assert str(venv) in where, f"the notebook's kernel did not run in the new venv: {where}"
        assert str(ROOT / "cgviz") in where, f"the kernel's cgviz is not this checkout's: {where}"
        print(f"binder venv in {folder}: installed in {installed - started:.0f} s, "
              f"notebook ran in {time.perf_counter() - installed:.0f} s")


def venv_env(venv: Path, tmp_path: Path) -> dict:
    """The environment of a shell with `venv` activated, and none of this user's Jupyter settings."""
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        PYTHONNOUSERSITE="1",
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
        JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        MPLCONFIGDIR=str(tmp_path / "matplotlib"),
    )
    env.pop("MPLBACKEND", None)  # the kernel's own inline backend, as on Binder
    return env


def make_venv_from_binder(venv: Path, tmp_path: Path) -> Path:
    """A new venv with what binder/requirements.txt lists; its python."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    env = venv_env(venv, tmp_path)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--no-compile"]
    requirements = BINDER / "requirements.txt"
    if torch_index_reachable():
        run(pip + ["-r", str(requirements)], env, ROOT, 1800)
    else:
        run(pip + [f"torch=={torch_version_of_makefile()}"], env, ROOT, 1800)
        rest = tmp_path / "requirements-without-torch.txt"
        rest.write_text(requirements_without_torch(requirements.read_text()))
        run(pip + ["-r", str(rest)], env, ROOT, 1800)
    return python
