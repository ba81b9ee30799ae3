"""Each batch padded to its own longest sequence: one CUDA graph recorded per distinct length.

Reported: https://github.com/pytorch/pytorch/issues/188150 (PyTorch 2.11.0+cu130)
What users see: the speedup disappears in training; every sequence length gets its own
  CUDA graph (forward and backward), warmed up eagerly the first time the dynamic graph
  sees it and recorded the second time. When one compiled graph reaches 9 distinct sizes
  it warns "CUDAGraph supports dynamic shapes by recording a new graph for each distinct
  input size. Recording too many CUDAGraphs may lead to extra overhead. We have observed 9
  distinct sizes. Please consider ... a) padding inputs to a few fixed number of shapes;
  or b) set torch._inductor.config.triton.cudagraph_skip_dynamic_graphs=True". This
  program cycles through 5 lengths (one static compile, then a dynamic one), below that
  limit; the first length (17), first run by the static compile, is warmed up again by the
  dynamic graph when it comes back and, in these 10 steps, never recorded.
Fix (--fixed): pad every batch to one fixed length (the workaround in the issue and
  option a) of the warning), so one CUDA graph is recorded and then replayed.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"
MAX_LEN = 64

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
cmodel = torch.compile(model, mode="reduce-overhead")

for step, longest in enumerate([17, 23, 31, 40, 52] * 2):
    x = torch.randn(8, longest, 32, device=DEVICE)  # batch padded to its longest sequence
    if FIXED:
        x = F.pad(x, (0, 0, 0, MAX_LEN - longest))  # pad to one fixed length instead
    loss = cmodel(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

print(f"final loss {loss.item():.4f}")
