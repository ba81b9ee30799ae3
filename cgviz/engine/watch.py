"""Watching a warmup or recording run op by op: what it allocates, and whether it syncs with the host.

A CUDA graph cannot capture a copy from the device to the host (`.item()`, `.cpu()`,
`nonzero`); a warmup that does one tells the tree to run the function eagerly. Both
backends use this watcher, so they decide alike.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from cgviz.engine._torch_compat import storage_id

# aten ops that read device memory on the host
HOST_SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::equal", "aten::is_nonzero"})


def _strided(values) -> list[torch.Tensor]:
    return [t for t in tree_flatten(values)[0] if isinstance(t, torch.Tensor) and t.layout == torch.strided]


class RunWatcher(TorchDispatchMode):
    """Notes host syncs and the storages that ops allocate (outputs not aliasing an op input)."""

    def __init__(
        self,
        on_new_storage: Optional[Callable[[torch.UntypedStorage], None]] = None,
        after_op: Optional[Callable[[], None]] = None,
    ) -> None:
        super().__init__()
        self.on_new_storage = on_new_storage
        self.after_op = after_op
        self.host_sync: Optional[str] = None
        self.new_storages: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = _strided((args, kwargs))
        outs = _strided(out)
        if self.host_sync is None:
            name = func._schema.name
            if name in HOST_SYNC_OPS:
                self.host_sync = name
            elif any(t.device.type == "cpu" for t in outs) and any(t.device.type != "cpu" for t in ins):
                self.host_sync = name
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
        return f"it copies device memory to the host ({self.host_sync}), which a CUDA graph cannot capture"


def rebase(view: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """`view` of `source` rebuilt as the same view of `target` (same layout as `source`).

    An output that aliases an input copied into a graph buffer must alias the caller's
    tensor, as in eager, not the buffer the next replay overwrites.
    """
    offset = view.storage_offset() - source.storage_offset() + target.storage_offset()
    return target.new_empty(0).set_(target.untyped_storage(), offset, view.size(), view.stride())
