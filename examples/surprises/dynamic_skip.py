"""cudagraph_skip_dynamic_graphs=True, yet one CUDA graph is still recorded per input size.

Reported: https://github.com/pytorch/pytorch/issues/196385
What users see: the config promises to skip CUDA graphs for dynamic-shape graphs, but
  TORCH_LOGS=cudagraphs shows "Recording cudagraph tree for symint key N" (from torch 2.13
  prefixed with "[<compile id>] ") for every new row count. With graph partitioning (on by
  default in torch 2.11) the option does not skip the whole graph; it only moves nodes whose
  own code or output uses a size symbol out of the CUDA graph. ``torch.median`` is an extern
  (fallback) kernel that reads the dynamic ``rows`` but returns a 0-d tensor, so it is not
  detected and stays in the captured partition, which then takes the size as an input: a new
  recording for each size (PR #196504 proposes the detection).
Fix (--fixed): name the op in ``torch._inductor.config.custom_should_partition_ops``
  so it runs outside the CUDA graph; the captured partition then has static shapes
  and is recorded once and replayed for every size.
"""
import sys

import torch
import torch._inductor.config as inductor_config

FIXED = "--fixed" in sys.argv[1:]
DEVICE = "cuda"

inductor_config.triton.cudagraph_skip_dynamic_graphs = True
if FIXED:
    inductor_config.custom_should_partition_ops = ["aten::median"]


def fn(rows, weight):
    return torch.median(rows) * (weight @ weight).relu()  # median reads the dynamic rows


compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True)

torch.manual_seed(0)
weight = torch.randn(64, 64, device=DEVICE)
with torch.no_grad():
    for n in (10, 13, 16, 19, 22) * 2:
        rows = torch.randn(n, 64, device=DEVICE)
        torch._dynamo.mark_dynamic(rows, 0)
        out = compiled(rows, weight)
        total = out.sum().item()

print(f"last sum {total:.3f}")
