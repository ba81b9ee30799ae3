"""What a device must do for the tree.

The tree (engine/tree.py) holds every decision; a backend only performs device
operations: run a function eagerly with its allocations in the tree's pool, capture
a graph, replay it, checkpoint/restore the pool allocator, list the pool's segments,
and make stale outputs raise. `sim` and `cuda` implement this protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

import torch

from cgviz._torch.allocator import RawSegment


def describe_exception(exc: BaseException) -> str:
    """'ValueError: message', even for an exception whose __str__ itself raises."""
    try:
        message = str(exc)
    except Exception as failure:
        message = f"<message not shown: its __str__ raised {type(failure).__name__}>"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


NOT_NOW = object()  # what a backend's steady_replay returns where the graph's outputs are live


class CaptureUnsupported(Exception):
    """A backend could not capture the function into a graph; the message says why."""


class OutputRef(Protocol):
    """Tracks one output storage handed to the user: is it still referenced?"""

    def alive(self) -> bool: ...

    def invalidate(self, message: str) -> None:
        """Make every later access of the user's tensor raise RuntimeError(message)."""


@dataclass
class LeafInfo:
    """Metadata of one flattened output leaf of a run."""

    shape: list[int]
    dtype: str
    nbytes: int
    address: Optional[int]
    alias_of: Optional[str]  # "input i", "output j", "external", or None (own pool memory)
    ref: Optional[OutputRef]  # None when the output is not pool memory of this run


@dataclass
class RunResult:
    """What a warmup, record or replay hands back to the tree."""

    outputs: Any  # the structure returned to the user
    leaves: list[LeafInfo]  # one per tensor leaf, in pytree order
    graph: Any = None  # the backend's graph handle (record only)
    input_buffers: Optional[dict[int, int]] = None  # input index -> pool address (record only)
    capture_blocker: Optional[str] = None  # warmup only: why this function cannot be captured
    mutated: frozenset[int] = frozenset()  # inputs the run wrote in place (warmup only)
    kernels: Optional[list] = None  # record only, when asked: the graph's nodes, [[name, count], ...]


class Backend(Protocol):
    name: str
    device: torch.device

    def describe(self) -> dict:
        """Backend, device and version facts for the trace's meta."""

    def unsupported_input(self, t: torch.Tensor) -> Optional[str]:
        """Why this tensor cannot be a graph input on this backend, or None."""

    def address(self, t: torch.Tensor) -> int:
        """The device address of the tensor's first element (raises if it was invalidated)."""

    def warmup(self, fn: Callable, args: Sequence[Any]) -> RunResult: ...

    def record(self, fn: Callable, args: Sequence[Any], copy_inputs: Sequence[int]) -> RunResult:
        """Capture `fn` into a graph in the pool; inputs at `copy_inputs` get pool buffers."""

    def replay(self, graph: Any, args: Sequence[Any], copy_inputs: Sequence[int]) -> tuple[Any, list]:
        """Copy inputs, replay; the outputs for the user and one OutputRef (or None) per tensor leaf."""

    def steady_replay(self, graph: Any, copy_inputs: Sequence[int]) -> Optional[Callable[[Sequence[Any]], Any]]:
        """The inference loop's replay of a root (engine/steady.py): args -> the outputs, or NOT_NOW
        when the graph's outputs are live, checked as their refs' alive() would; None where this
        backend has no faster way than the tree's own steps (replay() and the refs)."""

    def checkpoint(self) -> Any:
        """The pool allocator's state, to restore before recording a child after replays."""

    def restore(self, state: Any, live: Sequence[tuple[int, OutputRef]], dead_addresses: Sequence[int]) -> None:
        """Put the pool back to `state`: `live` (address, ref) outputs stay allocated and are freed
        when they die; `dead_addresses`, allocated in `state`, are freed now."""

    def segments(self) -> list[RawSegment]: ...

    def check_cloning(self) -> None:
        """Raise if this backend cannot clone outputs out of the pool (generation cloning)."""

    def clone_out(self, ref: OutputRef) -> int:
        """Copy a live output's storage out of the pool and move the user's tensors onto the
        copy, so they keep their values while the pool is reused; the tree stops tracking it
        (`ref.alive()` is False from then on). Returns the bytes copied."""

    def timer(self) -> Any:
        """Times runs for the profile: ``start() -> token``, ``stop(token) -> handle``,
        ``read(handle, wait) -> µs or None`` (None: not done yet), and a ``clock`` name."""


def make_backend(device: str) -> "Backend":
    """'auto' = cuda when available, else sim; 'sim'; 'cuda' or 'cuda:N'."""
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'auto', 'sim' or 'cuda:0', not {type(device).__name__}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "sim"
    if device == "sim":
        from cgviz.engine.sim import SimBackend

        return SimBackend()
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"Tree(device={device!r}): CUDA is not available with torch {torch.__version__}; "
                "use device='sim' (CPU simulation) or device='auto'"
            )
        from cgviz.engine.cuda import CudaBackend

        return CudaBackend(torch.device(device))
    raise ValueError(f"unknown device {device!r}: expected 'auto', 'sim', 'cuda' or 'cuda:N'")
