"""What loading refuses beyond a field's type, and how its messages word a problem: the error, the
values json reads that a trace cannot hold (`Unreadable`), text holding a lone surrogate, free-form
JSON that would load and fail later, counts, and a value's JSON type as a message names it."""

from __future__ import annotations

import json
import math
import sys
import typing
from typing import Any

from cgviz.trace.surrogates import SURROGATE


class TraceFormatError(ValueError):
    """A trace file (or string) that is not a readable cgviz trace; the message says why."""


# How deep the free-form `meta` may nest: deeper would load, then fail to save (RecursionError).
META_DEPTH = 100


class Unreadable:
    """A value Python's json reads but a trace cannot hold: NaN or Infinity (not JSON, and
    refused when saving) or an integer of more digits than int() converts."""

    __slots__ = ("kind", "problem")

    def __init__(self, kind: str, problem: str) -> None:
        self.kind, self.problem = kind, problem

    def __repr__(self) -> str:
        return self.kind

    @classmethod
    def constant(cls, name: str) -> "Unreadable":
        return cls(name, f"is {name}, which is not a JSON number (a trace holds finite numbers only)")

    @classmethod
    def integer(cls, digits: str) -> Any:
        try:
            return int(digits)
        except ValueError:
            n, limit = len(digits.lstrip("-")), sys.get_int_max_str_digits()
            return cls(f"a {n}-digit integer", f"is an integer of {n} digits, more than the {limit} Python converts")


def check_text(text: str, ctx: str, name: str, subject: str = "") -> None:
    """Refuse a string holding a lone surrogate (a JSON escape such as \\ud800 read alone):
    UTF-8 cannot encode it, so the trace could be loaded but not rendered or saved."""
    found = SURROGATE.search(text)
    if found:
        fail(ctx, name, f"{subject}must be valid Unicode text, but holds the lone surrogate {found.group()!r} "
                        f"at character {found.start()}")


def check_free_form(value: Any, ctx: str, name: str) -> None:
    """Check free-form JSON (`meta`) for what would load but fail later: lone surrogates, NaN
    and infinite numbers, integers too long, nesting too deep to save. Iterative, since the
    nesting is what may be too deep."""
    stack = [(value, name, 0)]
    while stack:
        item, where, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if not item.isascii():
                check_text(item, ctx, where)
        elif kind is float:
            if not math.isfinite(item):
                fail(ctx, where, f"must be a finite number, not {item!r}")
        elif kind is dict or kind is list:
            if depth == META_DEPTH:
                fail(ctx, name, f"nests deeper than {META_DEPTH} levels of arrays and objects")
            for key, v in item.items() if kind is dict else enumerate(item):
                if kind is dict and type(key) is str and not key.isascii():
                    check_text(key, ctx, where, "has a key that ")
                label = json.dumps(key, ensure_ascii=False) if kind is dict else key
                stack.append((v, f"{where}[{label}]", depth + 1))
        elif isinstance(item, Unreadable):
            fail(ctx, where, item.problem)


def check_count(value: Any, ctx: str, name: str) -> None:
    """Refuse anything but an integer, 0 or more."""
    if type(value) is not int or value < 0:
        fail(ctx, name, f"must be a count (0 or more), {not_or_got(value)}")


def check_positive(value: Any, ctx: str, name: str) -> None:
    """Refuse anything but an integer, 1 or more."""
    if type(value) is not int or value < 1:
        fail(ctx, name, f"must be a positive count, {not_or_got(value)}")


def not_or_got(value: Any) -> str:
    """'not a string' for a value of the wrong type, '(got -1)' for one out of range."""
    return f"not {json_kind(value)}" if type(value) not in (int, float) else f"(got {value!r})"


def shortened(value: Any, width: int = 60) -> str:
    """`value` as Python writes it, cut to `width` characters: a message quotes it, not all of it."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def wrong_type(value: Any, expected: str) -> str:
    """Why `value` cannot be a field's value: its own problem for an unreadable number."""
    if isinstance(value, Unreadable):
        return value.problem
    return f"must be {expected}, not {json_kind(value)}"


def json_kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    names = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number",
             str: "a string", list: "an array", dict: "an object"}
    if isinstance(value, Unreadable):
        return value.kind
    return names.get(type(value), type(value).__name__)


def fail(ctx: str, name: str, problem: str) -> typing.NoReturn:
    """Raise the error for field `name` of the object at `ctx` ("step 4 snapshot")."""
    where = f"{ctx}: " if ctx else ""
    raise TraceFormatError(f"{where}field {name!r} {problem}")
