"""The same chained call errors or not depending on how many times the producer ran before.

Reported: https://github.com/pytorch/pytorch/issues/122192
What users see: after a loop of 2 calls to ``producer``, ``consumer(x)`` raises
  RuntimeError: Error: accessing tensor output of CUDAGraphs that has been
  overwritten by a subsequent run. ...
  With a loop of 3 calls it does not. Calling ``consumer`` (another compiled
  function) starts a new generation. While ``producer`` is warming up (call 1) or
  recording (call 2), ending its generation frees its outputs and marks them so
  that any access raises. Once ``producer`` replays its recorded graph (call 3+),
  the fast path does not free or mark them (eellison in the issue: the checks
  only happen on warm-up and recording), so ``consumer`` runs as a child of the
  replayed graph and reads ``x`` without error.
Fix (--fixed): don't feed one compiled function's output straight into another
  across invocations; clone it (``x = producer(...).clone()``), which works
  whatever the number of iterations.
"""
import sys

import torch

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"

producer = torch.compile(torch.cos, mode="reduce-overhead")
consumer = torch.compile(torch.sin, mode="reduce-overhead")

torch.manual_seed(0)
for _ in range(2):  # with range(3) the last line below does not raise
    x = producer(torch.randn(64, device=DEVICE))
    if FIXED:
        x = x.clone()
y = consumer(x)  # reads producer's CUDA graph output

print(f"sum {y.sum().item():.4f}")
