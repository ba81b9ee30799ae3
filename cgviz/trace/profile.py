"""A trace's profile read as typed entries: `meta["profile"]`, written by `Tree(profile=True)`
(cgviz/engine/profile.py) and `observe_torch`, checked on load (meta_checks.py). Every view
reads it through `profile_entries`, so its keys are named in one place; the file keeps plain JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

__all__ = ["ProfileEntry", "profile_entry", "profile_entries", "timed_graphs"]

CUDA_EVENTS = "CUDA events"  # the clock of times measured on a GPU (else the sim's CPU wall clock)


@dataclass(frozen=True)
class ProfileEntry:
    """One node's times and kernels: replay and eager medians in µs (None where none was timed)."""

    node: str  # the node's id, as the profile keys it
    function: Optional[str] = None
    kind: Optional[str] = None  # "graph" or "warmup"
    kernels: tuple[tuple[str, int], ...] = ()  # the graph's kernels: (name, count), where they were read
    replay_us: Optional[float] = None
    eager_us: Optional[float] = None
    eager_is_first_call: bool = False  # the eager time is the function's first call (one-time setup)
    clock: Optional[str] = None

    @property
    def measured(self) -> bool:
        """Timed on a GPU with CUDA events (a ratio of these is a speed-up; of CPU times, not)."""
        return self.clock == CUDA_EVENTS


def profile_entry(node: str, entry: Mapping[str, Any]) -> ProfileEntry:
    """One entry of the table as the trace keeps it (`trace.meta["profile"][node]`)."""
    return ProfileEntry(node=str(node), function=entry.get("function"), kind=entry.get("kind"),
                        kernels=tuple((str(name), int(count)) for name, count in entry.get("kernels") or ()),
                        replay_us=entry.get("replay_us"), eager_us=entry.get("eager_us"),
                        eager_is_first_call=bool(entry.get("eager_is_first_call")), clock=entry.get("clock"))


def profile_entries(meta: Mapping[str, Any]) -> list[ProfileEntry]:
    """The profile of a trace's (or a rank's) meta, in the order it keeps; [] where there is none."""
    profile = meta.get("profile")
    if not isinstance(profile, dict):
        return []
    return [profile_entry(node, entry) for node, entry in profile.items() if isinstance(entry, dict)]


def timed_graphs(entries: list[ProfileEntry]) -> dict[str, list[ProfileEntry]]:
    """The recorded graphs that have a replay time, by function."""
    out: dict[str, list[ProfileEntry]] = {}
    for entry in entries:
        if entry.kind == "graph" and entry.replay_us is not None:
            out.setdefault(str(entry.function), []).append(entry)
    return out
