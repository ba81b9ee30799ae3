"""What both observing sessions (torch.compile's trees, every CUDA graph) do alike: stop one
observer and take the hooks off with the last, and save the trace where the caller asked."""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from cgviz.trace.io import check_save_target
from cgviz.trace.model import Trace
from cgviz.trace.ranks import rank_path


def leave(observer: Any, active: list, uninstall: Callable[[], None]) -> Trace:
    """Finish `observer` and drop it from `active`; with none left, `uninstall` (also when
    finishing raised). Returns its trace."""
    try:
        observer.finish()
    finally:
        if observer in active:
            active.remove(observer)
        if not active:
            uninstall()
    return observer.trace


def save_target(path: str | os.PathLike | None) -> Optional[str]:
    """Where the trace will go (`{rank}` filled in), refused now if it cannot be written: before
    anything runs."""
    if path is None:
        return None
    target = rank_path(path)
    check_save_target(target, "trace")
    return target


def save(trace: Trace, target: Optional[str]) -> None:
    """Save the trace at `target`, the rank (and device) it holds noted in its meta."""
    if target is not None:
        trace.save(rank_path(target, trace))
