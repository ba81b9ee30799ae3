"""Random call sequences on the sim backend, checked against eager PyTorch.

tests/random_workloads.py generates the sequences (seeded) and holds the checks: every value
equals eager, held outputs keep their values until mark_step() invalidates them and then raise,
user exceptions propagate unchanged and leave the tree usable, and the pool neither leaks nor
keeps the tree alive. A failure prints the seed and the action list, with a command to replay it.
"""

import pytest

from random_workloads import generate, run_workload

SEEDS = range(60)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sequence_on_sim(seed):
    run_workload(generate(seed), "sim")
