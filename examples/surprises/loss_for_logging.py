"""A training loop that keeps each step's loss tensor for logging and reads them at the end.

Reported: https://github.com/pytorch/pytorch/issues/170604
What users see: reading the kept losses after the loop raises
  RuntimeError: Error: accessing tensor output of CUDAGraphs that has been
  overwritten by a subsequent run. ... To prevent overwriting, clone the tensor
  outside of torch.compile() or call torch.compiler.cudagraph_mark_step_begin()
  before each model invocation.
  The loss is an output of the compiled function and lives in the CUDA graph pool;
  the next step's call starts a new generation and frees it. (Once the graph
  replays, each replay returns the same output tensor object and overwrites it in
  place: losses kept from those steps raise nothing but all show the latest value.)
  As the issue shows, cudagraph_mark_step_begin() does not keep old outputs alive
  (it starts the new generation itself); from torch 2.14 the message says that an
  output "that must remain live across generations" should be cloned outside
  torch.compile().
Fix (--fixed): keep a copy: ``losses.append(loss.detach().clone())``.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


@torch.compile(mode="reduce-overhead")
def compute_loss(x, y):
    return F.mse_loss(model(x), y)


losses = []
for step in range(8):
    x = torch.randn(8, 64, device=DEVICE)
    y = torch.randn(8, 1, device=DEVICE)
    loss = compute_loss(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.detach().clone() if FIXED else loss)  # keeps a CUDA graph output

print(f"mean loss {torch.stack(losses).mean().item():.4f}")
