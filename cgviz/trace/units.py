"""Bytes and times as people read them, and counted words: used by producers, analyses and views
alike (trace/words.py builds on them; views/text.py re-exports them)."""

from __future__ import annotations


def format_bytes(n: int, sign: bool = False) -> str:
    """512 B, 1.5 KiB, 2.0 MiB; with sign, +2.0 MiB / −512 B."""
    prefix = ("+" if n > 0 else "−" if n < 0 else "") if sign else ("-" if n < 0 else "")
    size = abs(n)
    if size < 1024:
        return f"{prefix}{size} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{prefix}{size:.1f} {unit}"
    raise AssertionError("unreachable")


def format_us(us: float) -> str:
    """41 µs, 1.2 ms, 3.4 s."""
    if us < 1000:
        return f"{us:.3g} µs" if us < 10 else f"{us:.0f} µs"
    if us < 1e6:
        return f"{us / 1000:.3g} ms"
    return f"{us / 1e6:.3g} s"


def plural(n: int, word: str) -> str:
    """'1 step', '3 steps'."""
    return f"{n} {word}" + ("" if n == 1 else "s")
