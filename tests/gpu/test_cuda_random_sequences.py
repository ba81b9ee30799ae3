"""Random call sequences on real CUDA graphs (cgviz.Tree("cuda")), checked against eager PyTorch.

The same generator and checks as tests/test_random_sequences.py (tests/random_workloads.py),
with more sequences; at the end of each, torch.cuda.memory_reserved() must be back to what it
was before the tree was made. Skipped without CUDA (tests/gpu/conftest.py). Not named
test_random_sequences.py: without __init__.py files pytest cannot collect two test modules of
the same name.
"""


import pytest

from random_workloads import generate, run_workload

SEEDS = range(200)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sequence_on_cuda(seed):
    run_workload(generate(seed), "cuda")
