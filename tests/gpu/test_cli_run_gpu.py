"""`cgviz run` on a GPU: a small training script, unchanged, observed; its trace holds torch's
recordings and replays, and the summary says where it went."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import cgviz
from helpers import ROOT

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

# a training loop of a compiled model `step`, optimizer `opt`, input `x` (both programs below)
LOOP = '''
for _ in range(6):
    torch.compiler.cudagraph_mark_step_begin()
    loss = step(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
'''

TRAIN = '''
import sys
import torch

model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=float(sys.argv[sys.argv.index("--lr") + 1]))
step = torch.compile(model, mode="reduce-overhead")
x = torch.randn(8, 16, device="cuda")
''' + LOOP + '''print("done", float(loss) >= 0)
'''


def test_a_training_script_runs_unchanged_and_its_trees_are_in_the_trace(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    done = subprocess.run([sys.executable, "-m", "cgviz", "run", "--html", "run.html", str(script), "--lr", "0.1"],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "done True" in done.stdout  # the program's own output, its arguments reached it
    trace = cgviz.Trace.load(tmp_path / "cgviz-run.cgtrace.json")
    kinds = {s.kind for s in trace.steps}
    assert {"warmup", "record", "execute"} <= kinds
    assert "trace saved to cgviz-run.cgtrace.json" in done.stderr and (tmp_path / "run.html").exists()


DDP_TRAIN = '''
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).cuda()
step = DistributedDataParallel(torch.compile(net, mode="reduce-overhead"), device_ids=[rank])
opt = torch.optim.SGD(step.parameters(), lr=0.1)
x = torch.randn(8, 32, device="cuda")
''' + LOOP + '''print(f"rank {rank} done")
dist.destroy_process_group()
'''


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_under_torchrun_every_rank_writes_its_own_trace_and_rank_0_says_how_to_merge(tmp_path):
    script = tmp_path / "ddp_train.py"
    script.write_text(DDP_TRAIN)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "cgviz", "run",
         "--trace-out", "ddp-{rank}.cgtrace.json", str(script)],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "rank 0 done" in done.stdout and "rank 1 done" in done.stdout
    assert "merge them with: cgviz merge ddp-*.cgtrace.json" in done.stderr
    traces = [cgviz.Trace.load(tmp_path / f"ddp-{rank}.cgtrace.json") for rank in (0, 1)]
    for trace in traces:
        assert {"warmup", "record", "execute"} <= {s.kind for s in trace.steps}
    merged = cgviz.merge([tmp_path / f"ddp-{rank}.cgtrace.json" for rank in (0, 1)])
    assert merged.meta["ranks"] and len(merged.meta["ranks"]) == 2
