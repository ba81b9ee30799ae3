"""No step's time includes cgviz's own imports: what a backend needs is imported when it is made,
so the first call's time (shown in summaries, explain() and findings) is the function's."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT

PROGRAM = """
import sys
import torch
import cgviz

tree = cgviz.Tree("sim")
f = tree.wrap(lambda x: x * 2 + 1, name="f")
x = torch.ones(8)
before = set(sys.modules)
for _ in range(3):
    f(x)
print(sorted(m for m in set(sys.modules) - before if m.startswith(("torch", "cgviz"))))
"""


def test_the_first_call_imports_nothing_of_torch_or_cgviz():
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
