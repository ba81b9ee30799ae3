"""A private memory pool's segments and blocks as the caching allocator reports them
(`torch.cuda.memory_snapshot()`), and the allocator's cumulative counters, which tell whether
they can have changed since the last reading."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch


@dataclass
class RawBlock:
    address: int
    size: int
    requested: int
    allocated: bool


@dataclass
class RawSegment:
    address: int
    size: int
    kind: str
    blocks: list[RawBlock]


_COUNTERS = (("allocation", "all", "allocated"), ("allocation", "all", "freed"), ("segment", "all", "allocated"),
             ("segment", "all", "freed"), ("requested_bytes", "all", "allocated"), ("requested_bytes", "all", "freed"),
             ("num_alloc_retries",), ("num_ooms",))


def allocator_counters(device_index: int) -> tuple:
    """The caching allocator's cumulative counts of allocations, frees, segments taken and given
    back (and the bytes asked): equal twice only if no block or segment changed in between."""
    stats = torch.cuda.memory.memory_stats_as_nested_dict(device_index)
    out = []
    for path in _COUNTERS:
        value: Any = stats
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        out.append(value)
    return tuple(out)


def pool_segments(device_index: int, pool: Any) -> list[RawSegment]:
    """The segments of one private pool, from torch.cuda.memory_snapshot()."""
    out = []
    for seg in torch.cuda.memory_snapshot():
        if seg.get("device") != device_index or tuple(seg.get("segment_pool_id", ())) != tuple(pool):
            continue
        blocks, address = [], seg["address"]
        for b in seg["blocks"]:
            start = b.get("address", address)
            state = b.get("state", "")
            blocks.append(RawBlock(start, b["size"], b.get("requested_size", 0), state.startswith("active")))
            address = start + b["size"]
        out.append(RawSegment(seg["address"], seg["total_size"], seg.get("segment_type", ""), blocks))
    return sorted(out, key=lambda s: s.address)


class PoolReading:
    """One private pool's segments, read again only when the caching allocator's cumulative
    counters moved since the last read (a steady replay moves none of them, and reading the
    allocator's snapshot costs more than the replay). `forget()` after the allocator's state
    was set wholesale (a checkpoint restore), which need not move the counters."""

    def __init__(self, device_index: int, pool: Any) -> None:
        self.device_index, self.pool = device_index, tuple(pool)
        self._kept: Optional[tuple[tuple, list[RawSegment]]] = None  # (counters, segments)

    def segments(self) -> list[RawSegment]:
        counters = allocator_counters(self.device_index)
        if self._kept is not None and self._kept[0] == counters:
            return self._kept[1]
        segments = pool_segments(self.device_index, self.pool)
        self._kept = (counters, segments)
        return segments

    def forget(self) -> None:
        self._kept = None
