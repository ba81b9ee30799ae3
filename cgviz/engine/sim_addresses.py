"""Addresses of the storages a sim tree sees outside its pool.

A CPU tensor's own address comes from the C library's allocator, which may or may not put
a new tensor where a freed one was, differently from one machine to the next; a static
input that lands back where a graph was recorded lets that graph replay. So the
simulation gives each storage outside the pool an address of its own, never one that a
freed storage had: a moved parameter records again on every machine. (On a GPU, the
caching allocator may hand a freed block to a new tensor, and a graph may replay by luck.)
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from cgviz.engine._torch_compat import storage_id

OUTSIDE_BASE_ADDRESS = 0x500000000000  # below the pool model's addresses, never reaching them
ALIGNMENT = 512  # as the caching allocator rounds blocks


class OutsideAddresses:
    """Hands out addresses in order, one per storage while it lives."""

    def __init__(self) -> None:
        self._next = OUTSIDE_BASE_ADDRESS
        self._known: dict[int, tuple[int, int, StorageWeakRef]] = {}  # storage id -> (address, data ptr, weak)

    def of(self, storage: torch.UntypedStorage) -> int:
        """The address of `storage`: the one it got when first seen, unless it was given other
        memory (resized) since. Its id cannot name another storage meanwhile: the weak
        reference kept here keeps the id's memory from being reused."""
        nbytes = storage.nbytes()
        if nbytes == 0:
            return 0
        sid, pointer = storage_id(storage), storage.data_ptr()
        entry = self._known.get(sid)
        if entry is not None and entry[1] == pointer:
            return entry[0]
        address = self._next
        self._next += -(-nbytes // ALIGNMENT) * ALIGNMENT
        self._known[sid] = (address, pointer, StorageWeakRef(storage))
        return address

    def forget_dead(self) -> None:
        """Drop the storages that died; their addresses are never handed out again."""
        for sid in [s for s, (_, _, weak) in self._known.items() if weak.expired()]:
            del self._known[sid]
