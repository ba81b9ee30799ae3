"""A reduce-overhead submodule inside a non-reentrant activation-checkpointed layer, training.

Reported: https://github.com/pytorch/pytorch/issues/154306
What users see: after a few training steps,
  RuntimeError: TODO: graph recording observed an input tensor deallocate during
  graph recording that did not occur during replay. Please file an issue.
  ``checkpoint(use_reentrant=False)`` re-runs the compiled submodule's forward
  inside backward, so the submodule's inputs and outputs are alive at different
  times than when its graph was recorded; the liveness check before replay fails.
  Reported as still reproducible with torch 2.11 (SimpleTuner PR #3155).
Fix (--fixed): the workaround given in the issue, ``use_reentrant=True``
  (the reentrant checkpoint runs the first forward under no_grad and recomputes it
  in backward as an ordinary forward). Other workarounds in use: compile the whole
  checkpointed layer, or leave checkpointed regions out of mode="reduce-overhead".
"""
import sys

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(64, 64)
        self.sub = torch.compile(nn.Sequential(nn.Linear(64, 64), nn.GELU()), mode="reduce-overhead")
        self.post = nn.Linear(64, 64)

    def forward(self, x):
        return self.post(self.sub(self.pre(x)))


torch.manual_seed(0)
embed, layer, head = nn.Linear(64, 64).to(DEVICE), Layer().to(DEVICE), nn.Linear(64, 1).to(DEVICE)
params = [*embed.parameters(), *layer.parameters(), *head.parameters()]
opt = torch.optim.SGD(params, lr=0.01)

for step in range(8):
    x = torch.randn(8, 64, device=DEVICE)
    h = checkpoint(layer, embed(x), use_reentrant=FIXED)  # compiled submodule inside the checkpoint
    loss = head(h).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

print(f"final loss {loss.item():.4f}")
