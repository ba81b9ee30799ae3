"""Swapping a weight by assigning a new tensor each step makes torch record a new CUDA graph each step.

Reported: https://github.com/huggingface/peft/pull/2611 (LoRA hot-swapping under
  torch.compile mode="reduce-overhead"; see also pytorch/pytorch PR #129349)
What users see: no error and no warning, but every call after the first (a warm-up)
  records a new CUDA graph instead of replaying one. Parameters are static inputs: torch
  assumes their addresses never change and checks it before each replay. Assigning a new
  tensor (``weight.data = new``) moves the parameter, so the check fails and torch
  re-records ("static input data pointer changed", shown only with TORCH_LOGS=cudagraphs).
  No limit applies to these re-recordings (torch 2.11: with inlined nn modules, the
  default; 2.12+: whatever the setting); each recorded graph stays in the tree, and all
  share the tree's one memory pool (each recording reuses the blocks the previous one freed).
Fix (--fixed): copy the new values into the existing parameter in place
  (``weight.data.copy_(new)``, the fix the PEFT PR made), so its address stays the
  same and the recorded graph is replayed.
"""
import sys

import torch
import torch.nn as nn

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).to(DEVICE)
adapter = model[2]
cmodel = torch.compile(model, mode="reduce-overhead")
new_weights = [torch.randn(64, 64, device=DEVICE) * 0.1 for _ in range(8)]  # e.g. adapters to serve

with torch.no_grad():
    for step in range(8):
        if FIXED:
            adapter.weight.data.copy_(new_weights[step])
        else:
            adapter.weight.data = new_weights[step]  # the parameter now lives at a new address
        out = cmodel(torch.randn(8, 64, device=DEVICE))
        total = out.sum().item()

print(f"last sum {total:.3f}")
