"""Tensors the sim backend hands out, so that invalidated outputs raise as on a GPU.

On CUDA, torch marks an overwritten output's storage so that any access raises. CPU
builds have no such hook, so the sim backend returns `SimOutput` tensors: ordinary
tensors that check a shared `Guard` before every torch operation. Views taken from a
SimOutput are SimOutputs with the same guard, so they are invalidated with it.
"""

from __future__ import annotations

import weakref
from typing import Optional

import torch
from torch.utils._pytree import tree_flatten

from cgviz.engine._torch_compat import make_subclass


class Guard:
    """Validity of the outputs sharing one storage within one run."""

    __slots__ = ("error", "tensors", "__weakref__")

    def __init__(self) -> None:
        self.error: Optional[str] = None
        self.tensors: "weakref.WeakSet[SimOutput]" = weakref.WeakSet()

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(self.error)

    def invalidate(self, message: str) -> None:
        """Raise on every later access, and let go of the storage so it no longer counts as live."""
        self.error = message
        with torch._C.DisableTorchFunctionSubclass():
            for t in list(self.tensors):
                t.set_()


class SimOutput(torch.Tensor):
    """A tensor output of a sim tree; raises once its run was invalidated."""

    _cgviz_guard: Guard

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        with torch._C.DisableTorchFunctionSubclass():
            guards = []
            for a in flat:
                if isinstance(a, SimOutput):
                    a._cgviz_guard.check()
                    guards.append((a._cgviz_guard, a.untyped_storage().data_ptr()))
            out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and not isinstance(out, SimOutput) and guards:
                ptr = out.untyped_storage().data_ptr() if out.layout == torch.strided else None
                for guard, gptr in guards:
                    if ptr == gptr and ptr:
                        return wrap(out, guard)
        return out


def wrap(t: torch.Tensor, guard: Guard) -> SimOutput:
    # not a view of t: once invalidated, set_() lets the storage go entirely
    with torch._C.DisableTorchFunctionSubclass():
        out = make_subclass(SimOutput, t)
    out._cgviz_guard = guard
    guard.tensors.add(out)
    return out


def unwrap(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor on the same storage (raises if `t` was invalidated)."""
    if isinstance(t, SimOutput):
        t._cgviz_guard.check()
        with torch._C.DisableTorchFunctionSubclass():
            return make_subclass(torch.Tensor, t)
    return t
