"""How cgviz words the ids and devices torch gives graphs, in plain text."""

from __future__ import annotations

from typing import Any, Optional


def torch_id_words(warmup: bool, number: Any) -> str:
    """torch's id of a node in plain words.

    Recorded graphs get ids 0, 1, 2, ... A warmup node runs the function eagerly and records no
    CUDA graph, so it has no graph id: torch numbers warmups on a counter of their own, -1, -2,
    ..., which here reads "torch warmup run 1 (eager, no CUDA graph)".
    """
    if not isinstance(number, int):
        return "torch warmup run (eager, no CUDA graph)" if warmup else "torch graph (id unknown)"
    if warmup:
        return f"torch warmup run {abs(number)} (eager, no CUDA graph)"
    return f"torch graph id {number}"


def device_name(index: Any) -> Optional[str]:
    """'cuda:1' for a device index torch keeps (None where it keeps none)."""
    return None if index is None else f"cuda:{index}"
