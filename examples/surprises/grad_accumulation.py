"""Gradient accumulation over two micro-batches with a reduce-overhead model.

Reported: https://github.com/pytorch/pytorch/issues/169545
What users see: the second micro-batch's ``loss.backward()`` raises
  RuntimeError: Error: accessing tensor output of CUDAGraphs that has been
  overwritten by a subsequent run. ...
  (torch 2.11/2.12; from 2.13, as the freed tensors are outputs of a backward: "Error: accessing
  gradient tensor output of CUDAGraphs that has been overwritten by a subsequent run. ...", which
  goes on to name the fix below.) The first backward's parameter gradients are outputs of the
  compiled backward, stored in the CUDA graph pool; autograd installs them as ``p.grad`` (grads
  were None after ``zero_grad(set_to_none=True)``). The next forward starts a new generation,
  which frees that memory, and the second backward then accumulates into the freed ``.grad``.
  Cloning does not help; cudagraph_mark_step_begin() once per optimizer step does.
Fix (--fixed): allocate stable ``.grad`` buffers (zeros) outside the CUDA graph pool before the
  compiled backward runs, and keep them, zeroed in place by ``zero_grad(set_to_none=False)``.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"
ACCUM = 2  # micro-batches per optimizer step

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
cmodel = torch.compile(model, mode="reduce-overhead")

if FIXED:
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # stable .grad buffers, allocated by eager code

for step in range(8):
    x = torch.randn(8, 64, device=DEVICE)
    y = torch.randn(8, 1, device=DEVICE)
    loss = F.mse_loss(cmodel(x), y) / ACCUM
    loss.backward()  # 2nd micro-batch accumulates into .grad from the 1st
    if (step + 1) % ACCUM == 0:
        opt.step()
        opt.zero_grad(set_to_none=not FIXED)

print(f"final loss {loss.item():.4f}")
