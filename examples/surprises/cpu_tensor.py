"""A host round trip (``.cpu()``) in the middle of a compiled forward.

Reported: https://github.com/pytorch/pytorch/issues/93666 ("adding a single bad op to
  your graph flips off cudagraphs"; user report: https://github.com/Comfy-Org/ComfyUI/issues/6866)
What users see: without graph partitioning, one line for the whole function,
  "skipping cudagraphs due to cpu device (device_put). Found from : ...", and no
  CUDA graph at all. In torch 2.11 graph partitioning is on by default: no message,
  but the compiled function becomes two CUDA graphs with an eager device-to-host
  copy (a synchronisation) and a host-to-device copy between them, i.e. two graph
  launches and a sync per call, and the second graph's input comes from eager code.
Fix (--fixed): keep the value on the GPU (``h / peak`` with ``peak`` a CUDA tensor),
  so the function is one graph and one CUDA graph.
"""
import sys

import torch
import torch.nn as nn

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(64, 64)
        self.out = nn.Linear(64, 64)

    def forward(self, x):
        h = self.inp(x)
        peak = h.abs().amax()
        if not FIXED:
            peak = peak.cpu().to(h.device)  # host round trip in the middle of forward
        return self.out(h / peak)


torch.manual_seed(0)
cmodel = torch.compile(Net().to(DEVICE), mode="reduce-overhead")
with torch.no_grad():
    for step in range(6):
        out = cmodel(torch.randn(8, 64, device=DEVICE))
        total = out.sum().item()

print(f"last sum {total:.3f}")
