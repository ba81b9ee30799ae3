"""Input buffers of a recorded graph: where non-static inputs are copied before each replay.

A buffer keeps the input's strides, so the graph sees the layout it was recorded with. An
expanded input (`x.expand(...)`, stride 0) has one element standing for many: copying into
a buffer with that layout would write one location many times, which torch refuses, so
such dimensions are narrowed to one element on both sides of the copy (as torch's trees do).
"""

from __future__ import annotations

from typing import Optional

import torch


def expanded_dims(t: torch.Tensor) -> tuple[int, ...]:
    """Dimensions broadcast by expand(): stride 0 and more than one element."""
    return tuple(d for d in range(t.dim()) if t.stride(d) == 0 and t.size(d) > 1)


def collapse(t: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """`t` with the expanded `dims` narrowed to their one real element."""
    for d in dims:
        t = t.narrow(d, 0, 1)
    return t


def input_buffer(t: torch.Tensor, device: Optional[torch.device] = None) -> torch.Tensor:
    """A new tensor with t's size and strides holding t's values."""
    buf = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=device or t.device)
    dims = expanded_dims(t)
    collapse(buf, dims).copy_(collapse(t, dims))
    return buf
