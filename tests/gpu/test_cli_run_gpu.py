"""`cgviz run` on a GPU: a small training script, unchanged, observed; its trace holds torch's
recordings and replays, and the summary says where it went."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cgviz

ROOT = Path(__file__).resolve().parents[2]

TRAIN = '''
import sys
import torch

model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=float(sys.argv[sys.argv.index("--lr") + 1]))
step = torch.compile(model, mode="reduce-overhead")
x = torch.randn(8, 16, device="cuda")
for _ in range(6):
    torch.compiler.cudagraph_mark_step_begin()
    loss = step(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("done", float(loss) >= 0)
'''


def test_a_training_script_runs_unchanged_and_its_trees_are_in_the_trace(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "cgviz", "run", "--html", "run.html", str(script), "--lr", "0.1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "done True" in done.stdout  # the program's own output, its arguments reached it
    trace = cgviz.Trace.load(tmp_path / "cgviz-run.cgtrace.json")
    kinds = {s.kind for s in trace.steps}
    assert {"warmup", "record", "execute"} <= kinds
    assert "trace saved to cgviz-run.cgtrace.json" in done.stderr and (tmp_path / "run.html").exists()
