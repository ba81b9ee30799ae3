"""Watching a warmup or recording run op by op: what it allocates, which inputs it writes,
and whether it needs the host (a sync or a data-dependent output shape).

A CUDA graph cannot capture a copy from the device to the host (`.item()`, `.cpu()`) nor
an op whose output shape depends on the data (`nonzero`, `x[mask]`, `unique`): on a GPU
those fail inside a capture. Both backends use this watcher, so they decide alike.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Callable, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from cgviz.engine._torch_compat import storage_id
from cgviz.trace import paths
from cgviz.trace.paths import code_dirs, frames_from

# frames in these directories are not the user's code: torch, cgviz, Python's own library
_NOT_USERS = code_dirs(os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       sysconfig.get_paths()["stdlib"])


def user_line(skip: int = 1) -> Optional[str]:
    """Where the user's code made the current call: the innermost frame outside torch and cgviz,
    as "model.py:42 in forward (y.sum().item())", its path portable; None when every frame is
    theirs. torch's own skip messages name such a line too."""
    return paths.user_line(frames_from(sys._getframe(skip)), _NOT_USERS)

# aten ops that read device memory on the host, named (is_nonzero carries no tag saying so; the
# others are named for certainty)
HOST_SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::equal", "aten::is_nonzero"})
# ops seen so far whose output shape depends on the data (named so in reasons)
DATA_DEPENDENT_SHAPE_OPS: set[str] = {"aten::nonzero"}
# ops whose tags say the host must see the data (a value, or an output shape)
HOST_SYNC_TAGS = (torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape, torch.Tag.cudagraph_unsafe)


def prepare() -> None:
    """Entering a TorchDispatchMode the first time imports torch._dynamo (about a second on a
    CPU): done when a backend is made, so that no step's time includes cgviz's own imports."""
    import torch._dynamo  # noqa: F401


class CaptureBroken(RuntimeError):
    """Raised by a watcher that refuses host syncs, at the op a capture could not take."""


def _strided(values) -> list[torch.Tensor]:
    return [t for t in tree_flatten(values)[0] if isinstance(t, torch.Tensor) and t.layout == torch.strided]


def _copies_to_host(func, args, kwargs) -> bool:
    """A copy from device memory into host memory (`.cpu()`, `.to("cpu")`, `cpu_t.copy_(x)`)."""
    name = func._schema.name
    if name == "aten::_to_copy":
        device = (kwargs or {}).get("device")
        src = args[0] if args else None
        return (
            device is not None and torch.device(device).type == "cpu"
            and isinstance(src, torch.Tensor) and src.device.type != "cpu"
        )
    if name in ("aten::copy_", "aten::_copy_from"):
        dst, src = (args[0], args[1]) if name == "aten::copy_" else (args[1], args[0])
        return (
            isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor)
            and dst.device.type == "cpu" and src.device.type != "cpu"
        )
    return False


def _needs_host(func, args, kwargs=None) -> bool:
    """Does this op need the data on the host (a sync, or an output shape read from the data)?"""
    if func._schema.name in HOST_SYNC_OPS or _copies_to_host(func, args, kwargs):
        return True
    if torch.Tag.dynamic_output_shape in func.tags:
        DATA_DEPENDENT_SHAPE_OPS.add(func._schema.name)
    if not any(tag in func.tags for tag in HOST_SYNC_TAGS):
        return False
    if func._schema.name == "aten::index":  # only boolean masks make the shape data-dependent
        indices = args[1] if len(args) > 1 else ()
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices)
    return True


def _written(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors an op writes in place, from its schema's alias annotations (`Tensor(a!)`)."""
    out = []
    for i, arg in enumerate(func._schema.arguments):
        info = arg.alias_info
        if info is None or not info.is_write:
            continue
        value = args[i] if i < len(args) else (kwargs or {}).get(arg.name)
        out.extend(_strided(value))
    return out


class RunWatcher(TorchDispatchMode):
    """Notes host syncs, the inputs written in place, and the storages that ops allocate.

    `inputs`: the run's inputs, so in-place writes to them are seen (inference tensors
    included, which keep no version counter). `refuse_host_sync`: raise CaptureBroken at
    the op, as a capture on a GPU would fail there.
    """

    def __init__(
        self,
        on_new_storage: Optional[Callable[[torch.UntypedStorage], None]] = None,
        after_op: Optional[Callable[[], None]] = None,
        inputs: Sequence = (),
        refuse_host_sync: bool = False,
    ) -> None:
        super().__init__()
        self.on_new_storage = on_new_storage
        self.after_op = after_op
        self.refuse_host_sync = refuse_host_sync
        self.host_sync: Optional[str] = None
        self.host_sync_at: Optional[str] = None  # the user's line that asked for it (user_line)
        self.new_storages: set[int] = set()
        self.mutated: set[int] = set()
        self._input_storages: dict[int, list[int]] = {}
        for i, t in enumerate(inputs):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                self._input_storages.setdefault(storage_id(t.untyped_storage()), []).append(i)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ins = _strided((args, kwargs))
        if self.host_sync is None and _needs_host(func, args, kwargs):
            self.host_sync = func._schema.name
            self.host_sync_at = user_line(2)
            if self.refuse_host_sync:
                raise CaptureBroken(self.capture_blocker())
        out = func(*args, **(kwargs or {}))
        outs = _strided(out)
        if self.host_sync is None:
            if any(t.device.type == "cpu" for t in outs) and any(t.device.type != "cpu" for t in ins):
                self.host_sync = func._schema.name
                self.host_sync_at = user_line(2)
        if self._input_storages and func._schema.is_mutable:
            for t in _written(func, args, kwargs):
                self.mutated.update(self._input_storages.get(storage_id(t.untyped_storage()), ()))
        arg_storages = {storage_id(t.untyped_storage()) for t in ins}
        for t in outs:
            st = t.untyped_storage()
            sid = storage_id(st)
            if sid not in arg_storages and st.nbytes() > 0:
                self.new_storages.add(sid)
                if self.on_new_storage is not None:
                    self.on_new_storage(st)
        if self.after_op is not None:
            self.after_op()
        return out

    def capture_blocker(self) -> Optional[str]:
        """Why a graph could not capture what this run did, or None."""
        if self.host_sync is None:
            return None
        at = f" at {self.host_sync_at}" if self.host_sync_at else ""
        if self.host_sync in DATA_DEPENDENT_SHAPE_OPS:
            return (
                f"its output shape depends on the data ({self.host_sync}{at}), which the host must read: "
                "a CUDA graph cannot capture that"
            )
        return f"it copies device memory to the host ({self.host_sync}{at}), which a CUDA graph cannot capture"


def rebase(view: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """`view` of `source` rebuilt as the same view of `target` (same layout as `source`).

    An output that aliases an input copied into a graph buffer must alias the caller's
    tensor, as in eager, not the buffer the next replay overwrites.
    """
    offset = view.storage_offset() - source.storage_offset() + target.storage_offset()
    return target.new_empty(0).set_(target.untyped_storage(), offset, view.size(), view.stride())
