"""What the caller says about a CUDA graph it captures or replays: the batch size it serves,
the rows of a replay that are in use (the rest is padding), a name.

Serving engines capture one graph per batch size and replay a request batch padded up to the
nearest one; nothing in the graph tells the padding apart, so the caller says it:

    with cgviz.graph_batch(8, label="decode"):       # captured for batch size 8
        with torch.cuda.graph(g8): ...
    with cgviz.graph_batch(8, used=5):               # 5 of the 8 rows are requests
        g8.replay()

Outside an observation (`cgviz.observe_graphs`) it only sets a thread-local value.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, NamedTuple, Optional

__all__ = ["graph_batch", "Batch", "current"]


class Batch(NamedTuple):
    size: int
    used: Optional[int]
    label: str


_STATE = threading.local()


def current() -> Optional[Batch]:
    """What the innermost `graph_batch` of this thread says, or None outside one."""
    return getattr(_STATE, "batch", None)


@contextlib.contextmanager
def graph_batch(size: int, used: Optional[int] = None, *, label: str = "") -> Iterator[Batch]:
    """Inside the block, a CUDA graph captured serves batch `size` (and is named `label`), and a
    replay has `used` of its `size` rows in use (the rest padding)."""
    if type(size) is not int or size < 1:
        raise ValueError(f"graph_batch size must be a positive integer, not {size!r}")
    if used is not None and (type(used) is not int or not 0 <= used <= size):
        raise ValueError(f"graph_batch used must be an integer from 0 to the size {size}, not {used!r}")
    if not isinstance(label, str):
        raise TypeError(f"graph_batch label must be a string, not {type(label).__name__}")
    outer = current()
    _STATE.batch = batch = Batch(size, used, label)
    try:
        yield batch
    finally:
        _STATE.batch = outer
