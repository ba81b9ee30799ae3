"""Tests for the simulated private-pool allocator (cgviz.engine.pool_model)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from cgviz.engine.pool_model import (
    BlockInfo,
    PoolModel,
    PoolState,
    SegmentInfo,
    kMinBlockSize,
    kSmallSize,
    round_size,
    segment_size_for,
)

KiB = 1024
MiB = 1024 * KiB
BASE = 0x7F0000000000


def only_segment(pool: PoolModel) -> SegmentInfo:
    segs = pool.segments()
    assert len(segs) == 1
    return segs[0]


# -- rounding and segment sizes ---------------------------------------------


@pytest.mark.parametrize(
    "nbytes, rounded",
    [(0, 512), (1, 512), (511, 512), (512, 512), (513, 1024), (MiB, MiB), (MiB + 1, MiB + 512)],
)
def test_round_size(nbytes: int, rounded: int) -> None:
    assert round_size(nbytes) == rounded


@pytest.mark.parametrize(
    "size, seg",
    [(512, 2 * MiB), (MiB, 2 * MiB), (MiB + 512, 20 * MiB), (10 * MiB - 512, 20 * MiB),
     (10 * MiB, 10 * MiB), (12 * MiB, 12 * MiB), (12 * MiB + 512, 14 * MiB)],
)
def test_segment_size_for(size: int, seg: int) -> None:
    assert segment_size_for(size) == seg


def test_zero_byte_request_takes_a_min_block() -> None:
    pool = PoolModel()
    a = pool.malloc(0)
    b = pool.malloc(0)
    assert pool.block_at(a) == BlockInfo(a, 512, 0, True, None)
    assert b == a + 512


def test_small_request_in_small_segment() -> None:
    pool = PoolModel()
    a = pool.malloc(100, tag="x")
    assert a == BASE
    seg = only_segment(pool)
    assert (seg.address, seg.size, seg.kind) == (BASE, 2 * MiB, "small")
    assert seg.blocks == (
        BlockInfo(BASE, 512, 100, True, "x"),
        BlockInfo(BASE + 512, 2 * MiB - 512, 0, False, None),
    )
    assert pool.reserved_bytes == 2 * MiB
    assert pool.allocated_bytes == 512
    assert pool.requested_bytes == 100


def test_medium_large_request_gets_20mib_segment() -> None:
    pool = PoolModel()
    a = pool.malloc(3 * MiB)
    seg = only_segment(pool)
    assert (seg.size, seg.kind) == (20 * MiB, "large")
    assert [(b.size, b.allocated) for b in seg.blocks] == [(3 * MiB, True), (17 * MiB, False)]
    assert pool.block_at(a).size == 3 * MiB


def test_big_request_gets_exact_rounded_segment() -> None:
    pool = PoolModel()
    pool.malloc(12 * MiB)
    seg = only_segment(pool)
    assert (seg.size, seg.kind) == (12 * MiB, "large")
    assert seg.blocks == (BlockInfo(BASE, 12 * MiB, 12 * MiB, True, None),)


def test_segments_are_placed_one_after_another() -> None:
    pool = PoolModel()
    pool.malloc(12 * MiB)
    pool.malloc(100)
    pool.malloc(3 * MiB)
    assert [(s.address, s.kind) for s in pool.segments()] == [
        (BASE, "large"),
        (BASE + 12 * MiB, "small"),
        (BASE + 14 * MiB, "large"),
    ]
    assert pool.reserved_bytes == 34 * MiB


def test_small_and_large_pools_do_not_mix() -> None:
    pool = PoolModel()
    big = pool.malloc(3 * MiB)
    pool.free(big)  # 20 MiB of free large memory
    small = pool.malloc(100)
    assert pool.segments()[1].kind == "small"
    assert small == BASE + 20 * MiB
    # and a large request never uses the small segment's free space
    pool2 = PoolModel()
    pool2.malloc(100)
    large = pool2.malloc(MiB + 1)
    assert large == BASE + 2 * MiB


# -- splitting ----------------------------------------------------------------


def test_small_block_split_down_to_min_block() -> None:
    pool = PoolModel()
    pool.malloc(MiB)
    pool.malloc(MiB - 512)
    last = pool.malloc(1)  # exactly fills the last 512 bytes
    assert last == BASE + 2 * MiB - 512
    assert len(pool.segments()) == 1
    assert all(b.allocated for b in only_segment(pool).blocks)
    assert pool.malloc(1) == BASE + 2 * MiB  # segment full: a new one


def test_large_remainder_of_exactly_1mib_is_not_split() -> None:
    pool = PoolModel()
    a = pool.malloc(19 * MiB)  # 20 MiB segment, 1 MiB left over
    seg = only_segment(pool)
    assert seg.size == 20 * MiB
    assert seg.blocks == (BlockInfo(a, 20 * MiB, 19 * MiB, True, None),)
    assert pool.allocated_bytes == 20 * MiB
    assert pool.requested_bytes == 19 * MiB


def test_large_remainder_above_1mib_is_split() -> None:
    pool = PoolModel()
    pool.malloc(19 * MiB - 512)
    assert [(b.size, b.allocated) for b in only_segment(pool).blocks] == [
        (19 * MiB - 512, True),
        (MiB + 512, False),
    ]


def test_big_request_no_split_keeps_whole_rounded_segment() -> None:
    pool = PoolModel()
    a = pool.malloc(11 * MiB + 1)  # rounded 11 MiB + 512 -> 12 MiB segment, rest < 1 MiB
    assert pool.block_at(a) == BlockInfo(a, 12 * MiB, 11 * MiB + 1, True, None)
    pool2 = PoolModel()
    pool2.malloc(10 * MiB + MiB // 2)  # 12 MiB segment, 1.5 MiB rest is split off
    assert [b.size for b in only_segment(pool2).blocks] == [10 * MiB + MiB // 2, 3 * MiB // 2]


def test_whole_large_block_reused_when_remainder_small() -> None:
    pool = PoolModel()
    a = pool.malloc(4 * MiB)
    pool.malloc(4 * MiB)  # separator
    pool.free(a)
    b = pool.malloc(3 * MiB + 1)  # 4 MiB free block, remainder < 1 MiB: whole block
    assert b == a
    assert pool.block_at(b).size == 4 * MiB


# -- best fit, free, merge, reuse -----------------------------------------------


def test_best_fit_picks_smallest_fitting_block() -> None:
    pool = PoolModel()
    a = pool.malloc(4096)
    pool.malloc(512)
    b = pool.malloc(2048)
    pool.malloc(512)
    c = pool.malloc(8192)
    pool.malloc(512)
    for addr in (a, b, c):
        pool.free(addr)
    got = pool.malloc(1500)  # 1536 fits a (4096), b (2048), c (8192) and the tail
    assert got == b
    blocks = {blk.address: blk for blk in only_segment(pool).blocks}
    assert blocks[b].size == 1536 and blocks[b].allocated
    assert blocks[b + 1536] == BlockInfo(b + 1536, 512, 0, False, None)
    assert not blocks[a].allocated and not blocks[c].allocated


def test_best_fit_tie_goes_to_lowest_address() -> None:
    pool = PoolModel()
    x = pool.malloc(2048)
    pool.malloc(512)
    y = pool.malloc(2048)
    pool.malloc(512)
    pool.free(y)
    pool.free(x)
    assert pool.malloc(2048) == x
    assert pool.malloc(2048) == y


def test_best_fit_across_segments() -> None:
    pool = PoolModel()
    big = pool.malloc(12 * MiB)
    pool.malloc(3 * MiB)  # second large segment: 17 MiB free tail
    pool.free(big)  # 12 MiB free block in first segment
    assert pool.malloc(11 * MiB) == big  # 12 MiB < 17 MiB


def test_free_merges_with_both_neighbours() -> None:
    pool = PoolModel()
    x = pool.malloc(1000)
    y = pool.malloc(1000)
    z = pool.malloc(1000)
    pool.free(x)
    pool.free(z)  # merges with the free tail
    assert [(b.size, b.allocated) for b in only_segment(pool).blocks] == [
        (1024, False),
        (1024, True),
        (2 * MiB - 2048, False),
    ]
    pool.free(y)
    assert only_segment(pool).blocks == (BlockInfo(BASE, 2 * MiB, 0, False, None),)
    assert pool.allocated_bytes == 0
    assert pool.reserved_bytes == 2 * MiB  # the pool keeps its segment


def test_freed_block_is_reused_at_same_address() -> None:
    pool = PoolModel()
    pool.malloc(300)
    a = pool.malloc(5000, tag="t")
    pool.malloc(300)
    pool.free(a)
    assert pool.block_at(a) is None
    assert pool.malloc(4900, tag="u") == a
    assert pool.block_at(a).tag == "u"
    assert len(pool.segments()) == 1


def test_retag_and_block_at() -> None:
    pool = PoolModel()
    a = pool.malloc(100, tag=("output", 1, 0))
    pool.retag(a, ("output", 2, 0))
    assert pool.block_at(a).tag == ("output", 2, 0)
    assert pool.block_at(a + 512) is None  # free block start
    assert pool.block_at(a + 1) is None  # interior
    assert pool.block_at(12345) is None


def test_release_empty_segments() -> None:
    pool = PoolModel()
    pool.malloc(12 * MiB)
    a = pool.malloc(100)
    b = pool.malloc(3 * MiB)
    pool.free(a)
    pool.free(b)
    assert pool.release_empty_segments() == 22 * MiB
    assert [s.address for s in pool.segments()] == [BASE]
    assert pool.reserved_bytes == 12 * MiB
    assert pool.release_empty_segments() == 0
    # released addresses are never handed out again
    assert pool.malloc(100) == BASE + 34 * MiB


# -- checkpoint / restore ----------------------------------------------------------


def test_checkpoint_restore_round_trip() -> None:
    pool = PoolModel()
    a = pool.malloc(700, tag="a")
    pool.malloc(3 * MiB, tag="b")
    pool.free(a)
    state = pool.checkpoint()
    assert isinstance(state, PoolState)
    assert state == pool.checkpoint()

    def script() -> list[int]:
        addrs = [pool.malloc(n, tag=n) for n in (600, 12 * MiB, 200, 2 * MiB, 100)]
        pool.free(addrs[2])
        addrs.append(pool.malloc(50))
        return addrs

    first = script()
    after = pool.checkpoint()
    assert after != state
    assert state.segments[0].blocks[0] == BlockInfo(BASE, 2 * MiB, 0, False, None)  # not mutated

    pool.restore(state)
    assert pool.checkpoint() == state
    assert pool.block_at(a) is None
    assert script() == first
    assert pool.checkpoint() == after


def test_restore_forgets_later_allocations() -> None:
    pool = PoolModel()
    state = pool.checkpoint()
    x = pool.malloc(100)
    pool.restore(state)
    assert pool.segments() == []
    with pytest.raises(ValueError):
        pool.free(x)
    assert pool.malloc(100) == BASE  # next segment address rewound too


def test_restore_into_fresh_model() -> None:
    pool = PoolModel()
    pool.malloc(100, tag="keep")
    state = pool.checkpoint()
    other = PoolModel()
    other.restore(state)
    assert other.segments() == pool.segments()
    other.free(BASE)
    assert other.allocated_bytes == 0 and pool.allocated_bytes == 512


# -- errors -----------------------------------------------------------------------


def test_negative_size_rejected() -> None:
    with pytest.raises(ValueError, match="negative"):
        PoolModel().malloc(-1)


def test_free_errors_name_the_address() -> None:
    pool = PoolModel()
    a = pool.malloc(100)
    with pytest.raises(ValueError, match=hex(a + 8)):
        pool.free(a + 8)  # interior
    with pytest.raises(ValueError, match=hex(a + 512)):
        pool.free(a + 512)  # free block start
    pool.free(a)
    with pytest.raises(ValueError, match=hex(a)):
        pool.free(a)  # double free
    with pytest.raises(ValueError, match=hex(a)):
        pool.retag(a, "t")


# -- property tests ------------------------------------------------------------------

sizes = st.one_of(
    st.integers(0, 4 * KiB),
    st.integers(0, 2 * MiB),
    st.integers(0, 24 * MiB),
)


def check_invariants(pool: PoolModel, live: dict[int, tuple[int, object]]) -> None:
    """``live`` maps address -> (requested bytes, tag) of every outstanding allocation."""
    segs = pool.segments()
    allocated: list[BlockInfo] = []
    prev_end = None
    for seg in segs:
        if prev_end is not None:
            assert seg.address >= prev_end
        prev_end = seg.address + seg.size
        pos = seg.address
        for i, b in enumerate(seg.blocks):
            assert b.address == pos, "blocks must tile the segment without gaps"
            assert b.size > 0 and b.size % kMinBlockSize == 0
            pos += b.size
            if i and not b.allocated:
                assert seg.blocks[i - 1].allocated, "adjacent free blocks must be merged"
            if b.allocated:
                allocated.append(b)
                assert (b.requested <= kSmallSize) == (seg.kind == "small")
            else:
                assert (b.requested, b.tag) == (0, None)
        assert pos == seg.address + seg.size, "blocks must cover the whole segment"
    assert {b.address for b in allocated} == set(live)
    slack = 0
    for b in allocated:
        requested, tag = live[b.address]
        assert pool.block_at(b.address) == b
        assert (b.requested, b.tag) == (requested, tag)
        extra = b.size - round_size(requested)
        # unsplit remainders: none in small segments, at most 1 MiB in large ones
        assert extra == 0 or (requested > kSmallSize and 0 < extra <= kSmallSize)
        slack += extra
    assert pool.allocated_bytes == sum(round_size(r) for r, _ in live.values()) + slack
    assert pool.allocated_bytes == sum(b.size for b in allocated)
    assert pool.requested_bytes == sum(r for r, _ in live.values())
    assert pool.reserved_bytes == sum(s.size for s in segs)
    ordered = sorted(allocated, key=lambda b: b.address)
    for left, right in zip(ordered, ordered[1:]):
        assert left.address + left.size <= right.address, "allocations overlap"


class PoolMachine(RuleBasedStateMachine):
    addresses = Bundle("addresses")

    def __init__(self) -> None:
        super().__init__()
        self.pool = PoolModel()
        self.live: dict[int, tuple[int, object]] = {}
        self.saved: list[tuple[PoolState, dict[int, tuple[int, object]]]] = []
        self.counter = 0

    @rule(target=addresses, nbytes=sizes)
    def malloc(self, nbytes: int) -> int:
        self.counter += 1
        addr = self.pool.malloc(nbytes, tag=("t", self.counter))
        assert addr not in self.live
        self.live[addr] = (nbytes, ("t", self.counter))
        return addr

    @rule(addr=consumes(addresses))
    def free(self, addr: int) -> None:
        # after a restore a bundle entry may be stale: the model must then reject it
        if addr in self.live:
            self.pool.free(addr)
            del self.live[addr]
        else:
            with pytest.raises(ValueError):
                self.pool.free(addr)

    @rule(addr=addresses)
    def retag(self, addr: int) -> None:
        if addr in self.live:
            self.pool.retag(addr, ("re", addr))
            self.live[addr] = (self.live[addr][0], ("re", addr))

    @rule()
    def checkpoint(self) -> None:
        self.saved.append((self.pool.checkpoint(), dict(self.live)))

    @precondition(lambda self: bool(self.saved))
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        state, live = data.draw(st.sampled_from(self.saved))
        self.pool.restore(state)
        self.live = dict(live)
        assert self.pool.checkpoint() == state

    @rule()
    def release(self) -> None:
        before = self.pool.reserved_bytes
        released = self.pool.release_empty_segments()
        assert self.pool.reserved_bytes == before - released
        assert all(len(s.blocks) > 1 or s.blocks[0].allocated for s in self.pool.segments())

    @invariant()
    def consistent(self) -> None:
        check_invariants(self.pool, self.live)


PoolMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestPoolMachine = PoolMachine.TestCase


ops = st.lists(st.tuples(st.booleans(), sizes, st.integers(0, 10**6)), max_size=30)


def run_ops(pool: PoolModel, script: list[tuple[bool, int, int]]) -> list[int]:
    """Replay a script of mallocs (False) and frees of the k-th live block (True)."""
    live: list[int] = []
    trace: list[int] = []
    for is_free, nbytes, pick in script:
        if is_free and live:
            addr = live.pop(pick % len(live))
            pool.free(addr)
            trace.append(-1)
        else:
            addr = pool.malloc(nbytes)
            live.append(addr)
            trace.append(addr)
    return trace


@settings(max_examples=100, deadline=None)
@given(prefix=ops, suffix=ops)
def test_restore_replays_identically(prefix, suffix) -> None:
    pool = PoolModel()
    run_ops(pool, prefix)
    state = pool.checkpoint()
    first = run_ops(pool, suffix)
    end = pool.checkpoint()
    pool.restore(state)
    assert run_ops(pool, suffix) == first
    assert pool.checkpoint() == end
