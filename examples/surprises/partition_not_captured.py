"""Nothing in the compiled graph can be captured, and torch 2.11 says nothing, even with cudagraph_or_error.

Reported: https://github.com/pytorch/pytorch/issues/176611
What users see: no CUDA graph is ever recorded, no "skipping cudagraphs" line,
  ``counters["inductor"]["cudagraph_skips"]`` stays 0, and
  ``triton.cudagraph_or_error=True`` (meant to raise when a graph is not captured)
  does not raise. Here the user followed option b) of torch's dynamic-shape warning
  (``cudagraph_skip_dynamic_graphs=True``) with ``dynamic=True``: every kernel uses
  the batch-size symbol, so graph partitioning (default in 2.11) leaves no partition
  to capture, and ``cudagraph_partition_post_compile`` returns early without
  reporting the skip (PRs #176619 / #193044 propose to report it).
Fix (--fixed): give the graph something to capture: pad batches to one size and
  compile with static shapes, so the single graph is recorded once and replayed
  (cudagraph_or_error stays on and has nothing to complain about).
"""
import sys

import torch
import torch._inductor.config as inductor_config
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"
PAD_TO = 32

inductor_config.triton.cudagraph_skip_dynamic_graphs = True
inductor_config.triton.cudagraph_or_error = True  # "raise if anything is not captured"

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).to(DEVICE)
cmodel = torch.compile(model, mode="reduce-overhead", dynamic=not FIXED)

with torch.no_grad():
    for batch in (8, 12, 16, 24, 8, 12):
        x = torch.randn(batch, 64, device=DEVICE)
        if FIXED:
            x = F.pad(x, (0, 0, 0, PAD_TO - batch))  # one static shape
        out = cmodel(x)
        total = out[:batch].sum().item()

print(f"last sum {total:.3f}")
