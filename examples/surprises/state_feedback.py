"""An output of step N fed back as an input of step N+1 (RNN hidden state, ``x = f(x)``).

Reported: https://github.com/pytorch/pytorch/issues/152887
What users see: the second step raises
  RuntimeError: Error: accessing tensor output of CUDAGraphs that has been
  overwritten by a subsequent run. ...
  The hidden state ``h`` returned by step N lives in the CUDA graph pool. Calling
  the compiled step again starts a new generation, which frees the previous
  generation's outputs, and the new call then reads the freed ``h``. The issue
  shows that ``torch.compiler.cudagraph_mark_step_begin()`` before each call fails
  the same way, while ``.clone()`` works.
Fix (--fixed): clone the state outside the compiled function before feeding it
  back (``h = rnn_step(x, h).clone()``).
"""
import sys

import torch
import torch.nn as nn

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"

torch.manual_seed(0)
inp = nn.Linear(64, 64).to(DEVICE)
rec = nn.Linear(64, 64).to(DEVICE)


@torch.compile(mode="reduce-overhead")
def rnn_step(x_t, h):
    return torch.tanh(inp(x_t) + rec(h))


xs = torch.randn(8, 8, 64, device=DEVICE)  # (time, batch, features)
with torch.no_grad():
    h = torch.zeros(8, 64, device=DEVICE)
    for t in range(8):
        h = rnn_step(xs[t], h)  # h is the previous step's CUDA graph output
        if FIXED:
            h = h.clone()

print(f"final state norm {h.norm().item():.4f}")
