"""A compiled decode step writes into a KV-cache tensor passed as an argument (in-place input mutation).

Reported: https://github.com/pytorch/pytorch/issues/120733 (reduce-overhead "seems to
  not allow mutated inputs"; see also https://github.com/pytorch/pytorch/issues/117281)
What users see: once per function,
  skipping cudagraphs due to mutated inputs (1 instances). Found from :
   File "mutated_input.py", line ..., in decode_step
  and then every call runs without CUDA graphs. Torch only lets a CUDA graph mutate
  inputs whose address it can rely on: parameters/buffers, tensors marked static,
  or outputs of an earlier CUDA graph. ``k_cache`` is an ordinary eager tensor,
  which torch would copy into the graph's own input buffer, so the write would be lost.
Fix (--fixed): mark the cache as a static address once, before the first call:
  ``torch._dynamo.mark_static_address(k_cache)`` (what transformers' static cache
  does), so the in-place write is recorded and replayed on the cache itself.
"""
import sys

import torch
import torch.nn as nn

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"
MAX_LEN = 16

torch.manual_seed(0)
proj = nn.Linear(64, 64).to(DEVICE)
k_cache = torch.zeros(8, MAX_LEN, 64, device=DEVICE)  # (batch, position, features)
if FIXED:
    torch._dynamo.mark_static_address(k_cache)


@torch.compile(mode="reduce-overhead")
def decode_step(x, pos, k_cache):
    k = proj(x).unsqueeze(1)  # (batch, 1, features)
    k_cache.index_copy_(1, pos, k)  # in-place write into an input that torch does not own
    att = torch.softmax(k @ k_cache.transpose(1, 2), dim=-1)
    return (att @ k_cache).squeeze(1)


with torch.no_grad():
    for t in range(8):
        x = torch.randn(8, 64, device=DEVICE)
        pos = torch.tensor([t], device=DEVICE)
        out = decode_step(x, pos, k_cache)
        total = out.sum().item()

print(f"last sum {total:.3f}, cache filled {int((k_cache.abs().sum(-1) > 0).sum())} slots")
