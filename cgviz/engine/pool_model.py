"""A pure-Python model of one private CUDA caching-allocator memory pool.

CUDA graphs allocate from a *private pool* of the caching allocator: memory
recorded into a graph stays reserved for that pool, and graphs sharing a pool
(as the graph trees of ``torch._inductor.cudagraph_trees`` do) reuse each
other's freed blocks.  Where a tensor lands therefore depends on the exact
history of mallocs and frees.  This module replays that history without a GPU
so the simulation backend can show realistic addresses, segments and
fragmentation.

The model follows the native allocator's rules for a single pool:

* every request is rounded up to a multiple of ``kMinBlockSize`` (512 B);
* requests of at most ``kSmallSize`` (1 MiB) are *small* and live only in
  2 MiB small segments; larger ones are *large* and live only in large
  segments (20 MiB for requests below 10 MiB, otherwise the request rounded
  up to a multiple of 2 MiB);
* best fit: the smallest free block of the matching kind that fits, lowest
  address on ties; a new segment is created only when nothing fits;
* a chosen block is split when the remainder is ``>= 512 B`` (small) or
  ``> 1 MiB`` (large); otherwise the whole block is handed out;
* a freed block merges with free neighbours of the same segment;
* segments are kept until explicitly released (like ``empty_cache``).

Differences from the real allocator:

* no streams or events: any free block may be reused at once;
* no expandable segments, no per-stream pools, no other pools;
* no garbage-collection threshold, ``max_split_size`` or oversize-block
  rules, no power-of-two round-up divisions;
* addresses are synthetic and deterministic, and never reused; the device
  never runs out of memory;
* allocations the graph makes outside the pool (e.g. library workspaces)
  are not modelled.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import Hashable, Literal, Optional

from cgviz.trace.ownership import MIN_BLOCK, round_size

kMinBlockSize = MIN_BLOCK
kSmallSize = 1 << 20  # 1 MiB
kSmallBuffer = 2 << 20  # 2 MiB
kLargeBuffer = 20 << 20  # 20 MiB
kMinLargeAlloc = 10 << 20  # 10 MiB
kRoundLarge = 2 << 20  # 2 MiB

BASE_ADDRESS = 0x7F0000000000
SEGMENT_ALIGNMENT = 2 << 20

SegmentKind = Literal["small", "large"]

__all__ = [
    "PoolModel",
    "PoolState",
    "SegmentInfo",
    "BlockInfo",
    "round_size",
    "segment_size_for",
    "kMinBlockSize",
    "kSmallSize",
    "kSmallBuffer",
    "kLargeBuffer",
    "kMinLargeAlloc",
    "kRoundLarge",
]


@dataclass(frozen=True)
class BlockInfo:
    """One block of a segment; free blocks have ``requested == 0`` and no tag."""

    address: int
    size: int
    requested: int
    allocated: bool
    tag: Hashable = None

    @property
    def end(self) -> int:
        return self.address + self.size


@dataclass(frozen=True)
class SegmentInfo:
    """One reserved segment; its blocks tile it in address order."""

    address: int
    size: int
    kind: SegmentKind
    blocks: tuple[BlockInfo, ...]


@dataclass(frozen=True)
class PoolState:
    """Immutable snapshot of a :class:`PoolModel`, for :meth:`PoolModel.restore`."""

    segments: tuple[SegmentInfo, ...]
    next_address: int


def segment_size_for(size: int) -> int:
    """Size of the segment created for a rounded request that fits nowhere."""
    if size <= kSmallSize:
        return kSmallBuffer
    if size < kMinLargeAlloc:
        return kLargeBuffer
    return kRoundLarge * ((size + kRoundLarge - 1) // kRoundLarge)


def _kind_of(size: int) -> SegmentKind:
    return "small" if size <= kSmallSize else "large"


def _should_split(kind: SegmentKind, remaining: int) -> bool:
    # Large remainders of at most 1 MiB are not worth a separate block: they
    # could only serve small requests, which never use large segments.
    if kind == "small":
        return remaining >= kMinBlockSize
    return remaining > kSmallSize


class _Segment:
    """Mutable working copy of a segment; blocks are frozen and replaced."""

    __slots__ = ("address", "size", "kind", "blocks")

    def __init__(self, address: int, size: int, kind: SegmentKind, blocks: list[BlockInfo]):
        self.address = address
        self.size = size
        self.kind = kind
        self.blocks = blocks

    def freeze(self) -> SegmentInfo:
        return SegmentInfo(self.address, self.size, self.kind, tuple(self.blocks))


class PoolModel:
    """Simulated private memory pool with the caching allocator's placement rules."""

    def __init__(self) -> None:
        self._segments: list[_Segment] = []  # ascending address order
        self._live: dict[int, _Segment] = {}  # allocated block address -> segment
        self._next_address = BASE_ADDRESS

    # -- allocation -------------------------------------------------------

    def malloc(self, nbytes: int, tag: Hashable = None) -> int:
        """Allocate ``nbytes`` and return the block's address."""
        nbytes = operator.index(nbytes)
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative size ({nbytes} bytes)")
        size = round_size(nbytes)
        kind = _kind_of(size)
        found = self._best_fit(kind, size)
        if found is None:
            seg = self._new_segment(kind, segment_size_for(size))
            index = 0
        else:
            seg, index = found
        block = seg.blocks[index]
        remaining = block.size - size
        if _should_split(kind, remaining):
            rest = BlockInfo(block.address + size, remaining, 0, False)
            seg.blocks[index : index + 1] = [
                BlockInfo(block.address, size, nbytes, True, tag),
                rest,
            ]
        else:
            seg.blocks[index] = BlockInfo(block.address, block.size, nbytes, True, tag)
        self._live[block.address] = seg
        return block.address

    def _best_fit(self, kind: SegmentKind, size: int) -> Optional[tuple[_Segment, int]]:
        best: Optional[tuple[_Segment, int]] = None
        best_key: Optional[tuple[int, int]] = None
        for seg in self._segments:
            if seg.kind != kind:
                continue
            for i, b in enumerate(seg.blocks):
                if not b.allocated and b.size >= size:
                    key = (b.size, b.address)
                    if best_key is None or key < best_key:
                        best, best_key = (seg, i), key
        return best

    def _new_segment(self, kind: SegmentKind, seg_size: int) -> _Segment:
        address = self._next_address
        seg = _Segment(address, seg_size, kind, [BlockInfo(address, seg_size, 0, False)])
        self._segments.append(seg)
        end = address + seg_size
        self._next_address = -(-end // SEGMENT_ALIGNMENT) * SEGMENT_ALIGNMENT
        return seg

    def free(self, address: int) -> None:
        """Return a block to the pool, merging it with free neighbours."""
        seg, i = self._locate(address, "free")
        blocks = seg.blocks
        start, end = i, i + 1
        if start > 0 and not blocks[start - 1].allocated:
            start -= 1
        if end < len(blocks) and not blocks[end].allocated:
            end += 1
        first = blocks[start]
        merged_size = sum(b.size for b in blocks[start:end])
        blocks[start:end] = [BlockInfo(first.address, merged_size, 0, False)]
        del self._live[address]

    def retag(self, address: int, tag: Hashable) -> None:
        """Change the tag of an allocated block (e.g. when ownership moves)."""
        seg, i = self._locate(address, "retag")
        seg.blocks[i] = replace(seg.blocks[i], tag=tag)

    def _locate(self, address: int, action: str) -> tuple[_Segment, int]:
        seg = self._live.get(address)
        if seg is None:
            raise ValueError(f"cannot {action} {address:#x}: not the start of an allocated block")
        for i, b in enumerate(seg.blocks):
            if b.address == address:
                return seg, i
        raise AssertionError(f"block {address:#x} missing from its segment")  # pragma: no cover

    def release_empty_segments(self) -> int:
        """Drop fully free segments (like ``empty_cache``); return bytes released."""
        keep = [s for s in self._segments if len(s.blocks) > 1 or s.blocks[0].allocated]
        released = sum(s.size for s in self._segments) - sum(s.size for s in keep)
        self._segments = keep
        return released

    # -- snapshots ----------------------------------------------------------

    def checkpoint(self) -> PoolState:
        """Snapshot the whole pool so a later :meth:`restore` can rewind to it."""
        return PoolState(tuple(s.freeze() for s in self._segments), self._next_address)

    def restore(self, state: PoolState) -> None:
        """Put the pool back into ``state``; later allocations replay identically."""
        self._segments = [
            _Segment(s.address, s.size, s.kind, list(s.blocks)) for s in state.segments
        ]
        self._live = {b.address: seg for seg in self._segments for b in seg.blocks if b.allocated}
        self._next_address = state.next_address

    def apply_checkpoint(self, state: PoolState) -> None:
        """Set the blocks back to ``state`` as the allocator's setCheckpointPoolState does.

        Unlike :meth:`restore`, memory stays reserved: segments made since the
        checkpoint remain, entirely free, and new segments keep new addresses.
        """
        kept = {s.address for s in state.segments}
        newer = [
            _Segment(s.address, s.size, s.kind, [BlockInfo(s.address, s.size, 0, False)])
            for s in self._segments
            if s.address not in kept
        ]
        next_address = self._next_address
        self.restore(state)
        self._segments = sorted(self._segments + newer, key=lambda seg: seg.address)
        self._next_address = max(next_address, state.next_address)

    # -- introspection ------------------------------------------------------

    def segments(self) -> list[SegmentInfo]:
        """All reserved segments in address order."""
        return [s.freeze() for s in self._segments]

    def block_at(self, address: int) -> Optional[BlockInfo]:
        """The allocated block starting at ``address``, or None."""
        if address not in self._live:
            return None
        seg, i = self._locate(address, "look up")
        return seg.blocks[i]

    @property
    def reserved_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def allocated_bytes(self) -> int:
        """Sum of allocated block sizes (whole blocks, as the allocator counts them)."""
        return sum(b.size for s in self._segments for b in s.blocks if b.allocated)

    @property
    def requested_bytes(self) -> int:
        return sum(b.requested for s in self._segments for b in s.blocks if b.allocated)

    def __repr__(self) -> str:
        return (
            f"PoolModel(segments={len(self._segments)}, reserved={self.reserved_bytes}, "
            f"allocated={self.allocated_bytes})"
        )
