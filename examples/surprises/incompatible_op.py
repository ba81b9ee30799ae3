"""A data-dependent-shape op (``torch.nonzero``) inside the compiled function.

Reported: https://github.com/pytorch/pytorch/issues/149944
What users see: without graph partitioning, "skipping cudagraphs due to disabling cudagraphs due
  to incompatible op aten.nonzero.default Found from ...": the whole function runs without CUDA
  graphs (the output's size is only known after the kernel ran, which a CUDA graph cannot replay).
  In torch 2.11 (graph partitioning on by default) there is no message: the op is cut out and runs
  eagerly between two CUDA graphs on every call, with a device-to-host sync to learn the number of
  selected rows; the second graph takes that number as a size, so it is warmed up anew for each
  distinct count and recorded only when a count repeats.
  (``capture_dynamic_output_shape_ops=True``, as in the issue, keeps nonzero in the graph; without
  it dynamo breaks the graph at nonzero instead.)
Fix (--fixed): keep shapes static: return the boolean mask and let the caller
  select rows outside the compiled function (or use ``torch.where``/masking).
"""
import sys

import torch
import torch.nn as nn

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"

torch._dynamo.config.capture_dynamic_output_shape_ops = True
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(DEVICE)


@torch.compile(mode="reduce-overhead")
def score_and_select(x):
    scores = model(x).squeeze(1)
    keep = scores > 0
    if FIXED:
        return scores, keep
    return scores, torch.nonzero(keep).squeeze(1)  # number of rows depends on the data


selected = 0
with torch.no_grad():
    for step in range(8):
        scores, keep = score_and_select(torch.randn(32, 64, device=DEVICE))
        selected += int(keep.sum()) if FIXED else keep.numel()

print(f"selected {selected} rows")
