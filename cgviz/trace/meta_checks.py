"""The free-form fields cgviz reads: the keys of `meta` that have a structure (a profile, a merged
trace's ranks, device and graph names, counts) and an output's `values`. Each is checked as the views
and commands use it, after the free-form check (so numbers here are finite and text is valid); keys
cgviz does not read are left as they are."""

from __future__ import annotations

import json
from typing import Any, Callable

from cgviz.trace.checks import TraceFormatError, check_count, check_positive, fail, json_kind, not_or_got, shortened


def check_meta(meta: dict, ctx: str) -> None:
    """The keys of a trace's meta (or a rank's meta in a merged trace) that cgviz reads."""
    for key, check in _META_CHECKS.items():
        if key in meta:
            check(meta[key], ctx, key)


def _check_profile(profile: Any, ctx: str, name: str) -> None:
    """`meta["profile"]` (Tree(profile=True), observe_torch): per node id (text), an entry of its
    function, kind, kernels ([[name, count], ...]) and times in µs (see cgviz/engine/profile.py)."""
    if type(profile) is not dict:
        fail(ctx, name, f"must be an object of profile entries by node id, not {json_kind(profile)}")
    for node, entry in profile.items():
        where = f"{ctx} {name} entry {json.dumps(node, ensure_ascii=False)}"
        if type(entry) is not dict:
            raise TraceFormatError(f"{where}: must be an object, not {json_kind(entry)}")
        for key in ("function", "kind", "clock"):
            if key in entry and type(entry[key]) is not str:
                fail(where, key, f"must be a string, not {json_kind(entry[key])}")
        for key in ("replay_us", "eager_us"):
            value = entry.get(key)
            if value is not None and (type(value) not in (int, float) or value < 0):
                fail(where, key, f"must be null or a number of microseconds, 0 or more, {not_or_got(value)}")
        for key in ("replays_timed", "eager_runs_timed"):
            if key in entry:
                check_count(entry[key], where, key)
        if "eager_is_first_call" in entry and type(entry["eager_is_first_call"]) is not bool:
            fail(where, "eager_is_first_call", f"must be true or false, not {json_kind(entry['eager_is_first_call'])}")
        kernels = entry.get("kernels")
        if kernels is None:
            continue
        if type(kernels) is not list:
            fail(where, "kernels", f"must be null or an array of [kernel name, count] pairs, not {json_kind(kernels)}")
        for i, pair in enumerate(kernels):
            if not (type(pair) is list and len(pair) == 2 and type(pair[0]) is str and type(pair[1]) is int
                    and pair[1] >= 0):
                fail(where, f"kernels[{i}]", f"must be a [kernel name, count] pair (got {shortened(pair)})")


def _check_ranks(ranks: Any, ctx: str, name: str) -> None:
    """`meta["ranks"]` of a merged trace (cgviz/trace/ranks.py): each rank's meta, checked as a meta."""
    if type(ranks) is not list:
        fail(ctx, name, f"must be an array of objects (each rank's meta), not {json_kind(ranks)}")
    for i, meta in enumerate(ranks):
        where = f"{ctx} {name}[{i}]"
        if type(meta) is not dict:
            raise TraceFormatError(f"{where}: must be an object, not {json_kind(meta)}")
        check_meta(meta, where)


def _check_strings(value: Any, ctx: str, name: str) -> None:
    if type(value) is not list:
        fail(ctx, name, f"must be an array of strings, not {json_kind(value)}")
    for i, item in enumerate(value):
        if type(item) is not str:
            fail(ctx, f"{name}[{i}]", f"must be a string, not {json_kind(item)}")


_META_CHECKS: dict[str, Callable[[Any, str, str], None]] = {
    "profile": _check_profile,
    "ranks": _check_ranks,
    "rank": check_count,
    "local_rank": check_count,
    "world_size": check_positive,
    "devices": _check_strings,  # trees on several devices of one process: their names
    "compiled_before_observing": _check_strings,  # graph names
    "cudagraph_skips_before_observing": check_count,
}
# What profile.value_summary writes for a number that is not finite.
_NOT_FINITE_TEXT = ("nan", "inf", "-inf")


def check_values(values: dict, ctx: str) -> None:
    """An output's `values` (Tree(values=True); cgviz/engine/profile.py's value_summary)."""
    for key in ("n", "true", "nan", "inf"):
        if key in values:
            check_count(values[key], ctx, f"values.{key}")
    head = values.get("head", [])
    if type(head) is not list:
        fail(ctx, "values.head", f"must be an array, not {json_kind(head)}")
    for i, v in enumerate(head):
        if type(v) not in (int, float, bool) and v not in _NOT_FINITE_TEXT:
            fail(ctx, f"values.head[{i}]", f"must be a number or true or false, not {json_kind(v)}")
    for key in ("min", "max", "mean"):
        v = values.get(key, 0)
        if type(v) not in (int, float) and v not in _NOT_FINITE_TEXT:
            fail(ctx, f"values.{key}", f"must be a number, not {json_kind(v)}")
