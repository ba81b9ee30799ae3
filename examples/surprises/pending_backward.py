"""Evaluating a model whose parameters require grad, without torch.no_grad().

Reported: https://github.com/pytorch/pytorch/issues/176846 (the warning; see also
  https://github.com/pytorch/pytorch/issues/138949 for the slowdown it causes)
What users see: after a few calls,
  UserWarning: Unable to hit fast path of CUDAGraphs because of pending, uninvoked
  backwards. Consider running with torch.no_grad() or using
  torch.compiler.cudagraph_mark_step_begin() before each model invocation
  and no speedup: every call runs the warm-up (eager) path and nothing is ever
  recorded. The forward records an autograd graph whose backward is never run;
  while a forward's backward is pending, torch does not start a new generation,
  and the previous output (still held by ``out``) stays live, so the tree can
  never leave warm-up. (Torch 2.12+ words the warning "outputs from a previous
  step still require backward. Ensure backward() is invoked or detach outputs".)
Fix (--fixed): run evaluation under ``torch.no_grad()``: an inference graph, no
  pending backward, recorded once and replayed.
"""
import contextlib
import sys

import torch
import torch.nn as nn

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).to(DEVICE)
model.eval()
cmodel = torch.compile(model, mode="reduce-overhead")

correct = 0
with torch.no_grad() if FIXED else contextlib.nullcontext():
    for step in range(8):
        x = torch.randn(8, 64, device=DEVICE)
        labels = torch.randint(0, 10, (8,), device=DEVICE)
        out = cmodel(x)  # parameters require grad: a forward with a pending backward
        correct += (out.argmax(-1) == labels).sum().item()

print(f"accuracy {correct / 64:.3f}")
