"""What each node costs and holds: replay and eager times, the kernels of its graph, and (with
`Tree(values=True)`) small summaries of its outputs' values.

Times are taken without a host sync per call: on cuda each timed run records two CUDA events
and the elapsed times are read later, when they are done (`harvest`), or all at once when the
trace is read (`Tree.trace` waits for the last ones). On sim there is no GPU: times are the
CPU wall clock of the simulated run, and the table says so.

The table lands in ``trace.meta["profile"]``: per node id (as text) its function, kind, kernels
(``[[name, count], ...]``, when read), median replay time and how many replays were timed (a
node's first 32, then one in 64), and the median eager time of the same function at the same
input signature (its warmups and eager runs), all in µs, with ``clock`` naming what measured them. A function's first call (lazy
initialisation, autotuning) is timed apart: it stands for the eager time only when nothing
else ran eagerly (``eager_is_first_call``).
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Optional

from cgviz.trace.profile import CUDA_EVENTS

if TYPE_CHECKING:
    from cgviz.engine.node import Node

__all__ = ["Profiler", "CudaTimer", "WallTimer", "value_summary"]

_TIME_ALL = 32  # a node's first replays are all timed ...
_TIME_EVERY = 64  # ... and then one in this many: a median needs samples, not every replay of a loop
_MAX_PENDING = 512  # timed runs not read yet; past this, the oldest are waited for
_MAX_SAMPLES = 2048  # kept per node: medians of a long run describe its latest part
_HEAD = 4  # first elements kept of each output


class WallTimer:
    """CPU wall-clock timing (the sim backend: nothing runs on a GPU)."""

    clock = "CPU wall clock (sim backend: not measured on a GPU)"

    def start(self) -> float:
        return time.perf_counter()

    def stop(self, token: float) -> float:
        return (time.perf_counter() - token) * 1e6

    def read(self, handle: float, wait: bool) -> Optional[float]:
        return handle


class CudaTimer:
    """CUDA events on the device's current stream; events are reused once read."""

    clock = CUDA_EVENTS

    def __init__(self, device: Any) -> None:
        self.device = device
        self._free: list = []

    def _event(self) -> Any:
        import torch

        return self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)

    def start(self) -> Any:
        import torch

        event = self._event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def stop(self, token: Any) -> tuple:
        import torch

        end = self._event()
        end.record(torch.cuda.current_stream(self.device))
        return token, end

    def read(self, handle: tuple, wait: bool) -> Optional[float]:
        start, end = handle
        if wait:
            end.synchronize()
        elif not end.query():
            return None
        us = start.elapsed_time(end) * 1000.0
        self._free += (start, end)
        return us


class Profiler:
    """Collects timings and kernel lists per node and writes the profile table."""

    def __init__(self, timer: Any) -> None:
        self.timer = timer
        self._pending: deque = deque()
        self._replays: dict[int, list[float]] = {}
        self._eager: dict[int, list[float]] = {}  # variant id -> eager run times, first calls aside
        self._first: dict[int, list[float]] = {}  # variant id -> its first call's time
        self._kernels: dict[int, list] = {}
        self._nodes: dict[int, tuple[str, str, int]] = {}  # node id -> (function, kind, variant id)
        self.dirty = False

    # -- timing ---------------------------------------------------------------------------------
    def start(self) -> Any:
        return self.timer.start()

    def times(self, node: "Node") -> bool:
        """Is this replay of `node` timed? Every one of its first replays, then one in
        `_TIME_EVERY`: two CUDA events per replay would cost a steady loop more than the
        rest of its bookkeeping."""
        return node.replays < _TIME_ALL or node.replays % _TIME_EVERY == 0

    def replayed(self, node: "Node", token: Any) -> None:
        self._add(("replay", node.id), self.timer.stop(token))

    def ran_eagerly(self, variant_id: int, token: Any, first: bool = False) -> None:
        """An eager run (a warmup or a fallback) of one function at one input signature; its
        first call (lazy initialisation, autotuning) is kept apart from the others."""
        self._add(("first" if first else "eager", variant_id), self.timer.stop(token))

    def _add(self, key: tuple, handle: Any) -> None:
        self._pending.append((key, handle))
        self.dirty = True
        if len(self._pending) > _MAX_PENDING:
            self._read_one(wait=True)
        if len(self._pending) % 32 == 0:
            self.harvest(wait=False)

    def harvest(self, wait: bool) -> None:
        """Read the timings that are done (all of them, waiting, with `wait`), oldest first."""
        while self._pending and self._read_one(wait):
            pass

    def _read_one(self, wait: bool) -> bool:
        key, handle = self._pending[0]
        us = self.timer.read(handle, wait)
        if us is None:
            return False
        self._pending.popleft()
        table = {"replay": self._replays, "eager": self._eager, "first": self._first}[key[0]]
        samples = table.setdefault(key[1], [])
        samples.append(us)
        if len(samples) > _MAX_SAMPLES:
            del samples[: len(samples) - _MAX_SAMPLES]
        return True

    # -- what nodes hold --------------------------------------------------------------------------
    def node_added(self, node: "Node") -> None:
        self._nodes[node.id] = (node.variant.label, node.kind, node.variant.id)
        self.dirty = True

    def kernels_read(self, node: "Node", kernels: Optional[list]) -> None:
        if kernels is not None:
            self._kernels[node.id] = kernels
            self.dirty = True

    def table(self) -> dict:
        """The profile of every node seen so far (waits for timings still running)."""
        self.harvest(wait=True)
        self.dirty = False
        out = {}
        for node_id, (function, kind, variant_id) in self._nodes.items():
            replays, eager = self._replays.get(node_id, []), self._eager.get(variant_id, [])
            first = not eager
            if first:
                eager = self._first.get(variant_id, [])
            out[str(node_id)] = {
                "function": function,
                "kind": kind,
                "kernels": self._kernels.get(node_id),
                "replay_us": _median(replays),
                "replays_timed": len(replays),
                "eager_us": _median(eager),
                "eager_runs_timed": len(eager),
                "eager_is_first_call": first and bool(eager),
                "clock": self.timer.clock,
            }
        return out


def _median(samples: list[float]) -> Optional[float]:
    return round(statistics.median(samples), 3) if samples else None


def value_summary(t: Any) -> dict:
    """A tensor's values in small form: its first elements, min / max / mean, NaN and Inf
    counts (reading them waits for the device: a host sync per output)."""
    import torch

    flat = t.detach().reshape(-1)
    out: dict[str, Any] = {"n": flat.numel()}
    if flat.numel() == 0:
        return out
    numeric = flat.is_floating_point() or flat.is_complex()
    head = flat[:_HEAD].to("cpu")
    out["head"] = [_plain(v) for v in (head.abs() if flat.is_complex() else head).tolist()]
    if flat.dtype == torch.bool:
        out["true"] = int(flat.sum().item())
        return out
    values = flat.abs() if flat.is_complex() else flat
    if numeric:
        finite = torch.isfinite(values)
        out["nan"] = int(torch.isnan(values).sum().item())
        out["inf"] = int(torch.isinf(values).sum().item())
        values = values[finite]
        if values.numel() == 0:
            return out
    values = values.double()  # exact statistics for every dtype (a mean of integers included)
    out["min"] = _plain(values.min().item())
    out["max"] = _plain(values.max().item())
    out["mean"] = _plain(values.mean().item())
    return out


def _plain(v: Any) -> Any:
    """A JSON-safe number: floats rounded to 6 significant digits; NaN / Inf as text."""
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        return float(f"{v:.6g}")
    return v
