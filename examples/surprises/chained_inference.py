"""Two separately compiled functions chained in inference: ``head(encoder(x))``.

Reported: https://github.com/pytorch/pytorch/issues/160281
What users see: the very first ``head(encoder(x))`` raises
  RuntimeError: Error: accessing tensor output of CUDAGraphs that has been overwritten by a
  subsequent run. ... To prevent overwriting, clone the tensor outside of torch.compile() or call
  torch.compiler.cudagraph_mark_step_begin() before each model invocation. (Torch 2.14+ says to
  call it before each model invocation, and to clone outside torch.compile() an output "that must
  remain live across generations".) Every call of a torch.compile'd function counts as a new
  invocation. With no backward pending (inference), calling ``head`` starts a new generation, which
  frees the outputs of the previous one, including ``encoder``'s output that ``head`` is about to
  read. Issue #160281 (open) asks torch to improve this heuristic.
Fix (--fixed): call ``torch.compiler.cudagraph_mark_step_begin()`` once per iteration, before
  ``encoder`` (not before ``head``), so both calls belong to one generation; clone the results
  kept: the next iteration's ``encoder`` call frees those of a warm-up or recording, and once the
  graphs replay, each replay overwrites them in place and returns the same tensor object.
"""
import sys

import torch
import torch.nn as nn

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"

torch.manual_seed(0)
encoder = torch.compile(nn.Sequential(nn.Linear(64, 64), nn.ReLU()).to(DEVICE), mode="reduce-overhead")
head = torch.compile(nn.Linear(64, 10).to(DEVICE), mode="reduce-overhead")

results = []
with torch.no_grad():
    for step in range(6):
        x = torch.randn(8, 64, device=DEVICE)
        if FIXED:
            torch.compiler.cudagraph_mark_step_begin()
        logits = head(encoder(x))  # head reads encoder's CUDA graph output
        results.append(logits.clone() if FIXED else logits)

print(f"mean logit {torch.stack(results).mean().item():.4f}")
