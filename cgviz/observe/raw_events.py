"""The replay loop's events, noted as plain data and made into steps in batches.

Whatever a hook on the replay path does is paid on every call of the user's loop, so at trace
level "events" those hooks only append here: a replayed node's step parts, `NEW_GENERATION`,
(`PATH_END`, node id), or an int for a CUDA graph outside the trees (see
TorchObserver.note_graph_event). The events are of one manager at a time, held weakly: nothing
of torch's is kept alive by them, and a manager torch frees leaves them plain data.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

RAW_BATCH = 4096
NEW_GENERATION = object()
PATH_END = "path_end"


class RawEvents:
    """The events noted and not yet made into steps; `make(manager, events)` makes them (in
    order; the manager None where torch freed it)."""

    def __init__(self, make: Callable[[Any, list], None]) -> None:
        self.make = make
        self.events: list = []
        self.manager_id: Optional[int] = None  # id() of the manager the events are from, while it lives
        self.manager_ref: Any = None  # a weak reference to it

    def hold(self, manager: Any) -> None:
        """The events noted from now on are `manager`'s (the caller makes those before them first)."""
        self.manager_id, self.manager_ref = id(manager), weakref.ref(manager, self.drop_manager)

    def drop_manager(self, _ref: Any = None) -> None:
        """Nothing of the manager is held any longer: torch shut it down, observing stopped, or torch
        freed it (its compiled functions died, and torch had no manager left to shut down). The
        events are plain data; a new manager is a new one."""
        self.manager_id = self.manager_ref = None

    def note(self, event: Any) -> None:
        """A replay-loop event, noted raw; a full batch is made into steps."""
        self.events.append(event)
        if len(self.events) >= RAW_BATCH:
            self.flush()

    def flush(self) -> None:
        """Make the noted events into steps."""
        if not self.events:
            return
        events, self.events = self.events, []
        self.make(self.manager_ref() if self.manager_ref is not None else None, events)
