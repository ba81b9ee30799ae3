"""Which node output owns each block of a pool: raw allocator segments into trace Segments.

The allocator knows blocks by address only; a trace names their owners (a node's output, an
input buffer), so a picture of the pool says what is in use and by whom.
"""

from __future__ import annotations

import bisect

from cgviz.trace.model import Block, NodeView, Segment

MIN_BLOCK = 512  # the caching allocator rounds every request up to a multiple of this


def round_size(nbytes: int) -> int:
    """Round a request up like the allocator does (0 bytes still takes a block)."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return MIN_BLOCK * ((nbytes + MIN_BLOCK - 1) // MIN_BLOCK)


def owned_segments(raw_segments: list, nodes: list[NodeView], buffers: dict) -> list[Segment]:
    """Pool segments, each block mapped to what lives in it, by address.

    During replays the allocator's view is stale (replays bypass it): memory it calls
    free may hold live outputs. Such a free block is shown split, each live output's
    bytes as an allocated piece owned by that output, so the picture shows what is in
    use. `buffers` (address -> (node, input)) claim the allocated blocks at their address.
    """
    live = sorted(
        (out.address, max(out.nbytes, 1), view.id, out.index)
        for view in nodes
        for out in view.outputs
        if out.alias_of is None and out.state == "live" and out.address is not None
    )
    segments = []
    for raw in raw_segments:
        blocks: list[Block] = []
        for b in raw.blocks:
            lo = bisect.bisect_left(live, (b.address,))
            hi = bisect.bisect_left(live, (b.address + b.size,))
            inside = live[lo:hi]
            if b.allocated or not inside:
                blocks.append(_claimed(b, inside, buffers))
                continue
            cursor = b.address
            for address, nbytes, node, out in inside:
                end = min(b.address + b.size, address + round_size(nbytes))
                if address < cursor:
                    continue
                if address > cursor:
                    blocks.append(Block(cursor, address - cursor, False))
                blocks.append(Block(address, end - address, True, nbytes, f"node {node} output {out}", node, out))
                cursor = end
            if cursor < b.address + b.size:
                blocks.append(Block(cursor, b.address + b.size - cursor, False))
        segments.append(Segment(raw.address, raw.size, raw.kind, blocks))
    return segments


def _claimed(b, inside: list, buffers: dict) -> Block:
    """An allocator block as it is, named after the live output or input buffer in it."""
    if inside:
        _, _, node, out = inside[0]
        return Block(b.address, b.size, b.allocated, b.requested, f"node {node} output {out}", node, out)
    if b.allocated and b.address in buffers:
        node, i = buffers[b.address]
        return Block(b.address, b.size, True, b.requested, f"node {node} input {i} buffer", node, None)
    owner = "unowned (intermediate or stale)" if b.allocated else None
    return Block(b.address, b.size, b.allocated, b.requested, owner)
