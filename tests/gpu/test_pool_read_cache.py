"""The CUDA backend reads its pool again only when the allocator's counters moved: at every
read of every scenario, what it returns equals a fresh read of torch's allocator snapshot."""

from __future__ import annotations

import pytest
import torch

from cgviz._torch.allocator import pool_segments
from cgviz.engine import cuda
from cgviz.scenarios import SCENARIOS, run_scenario

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_a_kept_pool_reading_equals_a_fresh_one_at_every_step(monkeypatch):
    kept_read = cuda.CudaBackend.segments
    seen = {"reads": 0, "kept": 0}
    wrong = []
    last: dict[int, object] = {}  # per backend, the reading it returned last

    def checked(self):
        got = kept_read(self)
        seen["reads"] += 1
        seen["kept"] += got is last.get(id(self))  # the same list: the reading was kept
        last[id(self)] = got
        fresh = pool_segments(self.index, self.pool)
        if got != fresh:
            wrong.append((len(got), len(fresh)))
        return got

    monkeypatch.setattr(cuda.CudaBackend, "segments", checked)
    for name in SCENARIOS:
        run_scenario(name, "cuda", trace="full")
    assert wrong == []
    assert seen["kept"] > 0 and seen["reads"] > seen["kept"]  # both ways were taken
