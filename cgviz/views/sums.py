"""Float sums that come out the same on every Python. From 3.12, sum() adds floats with
compensation, so a drawing whose sizes came from sum() moved by a rounding step between Python
releases; adding in turn is what sum() did before, everywhere."""

from __future__ import annotations

from typing import Iterable


def added_in_turn(values: Iterable[float]) -> float:
    """The floats added one after another, left to right (as sum() did up to Python 3.11)."""
    total = 0.0
    for value in values:
        total += value
    return total
