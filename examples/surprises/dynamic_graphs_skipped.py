"""dynamic=True with cudagraph_skip_dynamic_graphs=True: CUDA graphs asked for, none recorded.

Option: https://github.com/pytorch/pytorch/pull/122520 (added the option; no user report)
What users see: no speed-up from mode="reduce-overhead" and no message: with graph partitioning
  (the default) every kernel of a graph with symbolic input sizes is cut out of the CUDA graph
  while torch._inductor.config.triton.cudagraph_skip_dynamic_graphs is True, and torch records
  nothing (it logs no "skipping cudagraphs due to graph with symbolic shapes inputs" here).
Fix (--fixed): leave cudagraph_skip_dynamic_graphs at its default (False) so that torch records
  one CUDA graph per input size it sees (or pad inputs to a few sizes).
"""
import sys

import torch
import torch._inductor.config as inductor_config

FIXED = "--fixed" in sys.argv[1:]
inductor_config.triton.cudagraph_skip_dynamic_graphs = not FIXED


def scale_rows(x, weight):
    return (x @ weight).relu() * 2


compiled = torch.compile(scale_rows, mode="reduce-overhead", dynamic=True)

torch.manual_seed(0)
weight = torch.randn(64, 64, device="cuda")
with torch.no_grad():
    for rows in (8, 16, 24) * 3:
        out = compiled(torch.randn(rows, 64, device="cuda"), weight)
print(f"last output {tuple(out.shape)}, sum {out.sum().item():.3f}")
