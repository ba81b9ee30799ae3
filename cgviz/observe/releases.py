"""torch release numbers as cgviz compares them: the (major, minor) line, never a patch or build."""

from __future__ import annotations

import re
from typing import Optional


def release(version: str) -> tuple[int, int]:
    """(2, 14) for "2.14.1+cu130"; (0, 0) where the text names no release."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def in_span(installed: tuple[int, int], since: Optional[str], until: Optional[str]) -> bool:
    """Is the installed release at or after `since` and at or before `until` (either may be None)?"""
    if since is not None and installed < release(since):
        return False
    return not (until is not None and installed > release(until))
