"""A Python ``if`` on ``.item()`` inside the compiled function splits it into several graphs.

Reported: https://github.com/pytorch/pytorch/issues/158642
What users see: "Graph break from `Tensor.item()`, consider setting
  torch._dynamo.config.capture_scalar_outputs = True". The function then runs as a
  first CUDA graph, an eager ``.item()`` (a device-to-host sync) and a second graph
  for whichever branch was taken. The code after the break is recompiled as the ``.item()``
  value changes (first specialised on the value, then per branch): the first variant runs once,
  as a warm-up, and is never recorded; each per-branch one is recorded separately, as a
  different child in the CUDA graph tree, and every call pays two graph launches plus the sync.
  The reply in the issue: expected behaviour; rewrite the code to avoid ``item()``.
Fix (--fixed): keep the decision on the GPU with ``torch.where`` (both branches are
  computed), so the whole function is one graph and one CUDA graph.
"""
import sys

import torch
import torch.nn as nn

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"

torch.manual_seed(0)
l1, l2, l3 = (nn.Linear(64, 64).to(DEVICE) for _ in range(3))


@torch.compile(mode="reduce-overhead")
def gated_block(x):
    y = l1(x)
    if FIXED:
        return torch.where(y.sum() > 0, l2(y), l3(y))
    if y.sum().item() > 0:  # graph break: data-dependent Python branch
        return l2(y)
    return l3(y)


with torch.no_grad():
    for step in range(8):
        x = torch.randn(8, 64, device=DEVICE)
        out = gated_block(x)
        total = out.sum().item()

print(f"last sum {total:.3f}")
