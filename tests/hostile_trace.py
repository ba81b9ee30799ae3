"""A trace whose names are hostile: what a shared trace file may carry in every text field.

`HOSTILE` are the strings planted; `hostile_trace()` runs a sim tree whose functions are named
with them (the engine's own API), then plants them, through the saved JSON, in the fields the
API does not reach: node signatures, step reasons, output dtypes, block owners, meta strings
and a profile's kernel names. `shown(s)` is how a view writes a planted string (control
characters and line breaks as their escapes).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

import cgviz

__all__ = ["HOSTILE", "hostile_trace", "shown"]

_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ue000-\ue002\ufffe\uffff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shown(s: str) -> str:
    """`s` as the views write it: each control character, line or paragraph separator, lone
    surrogate, non-character or placeholder of the page's as its escape text (``\\n``, ``\\x07``,
    ``\\u2028``)."""
    def one(m: "re.Match") -> str:
        c = m.group()
        return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")

    return _UNSHOWN.sub(one, s)


#: Strings that would break a view, run script or read as markup if a view wrote them as they are.
HOSTILE = [
    '<x> URL="javascript:window.__pwned=1" target="_self" label=<y>',
    "</script><script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=1">',
    '"><svg onload="window.__pwned=1"><a href="javascript:window.__pwned=1">',
    "<lambda>",
    "a&amp;b \\N \\G \\L \\n ]]> <!-- x",
    "nul\x00bel\x07esc\x1bdel\x7fpua\ue000\ue001\ue002",  # the last three: the page's placeholders
    "line1\nline2\rline3\tend",
    "ls\u2028ps\u2029end",
    "$x^2$",
    "$\\frac{$",
    "{}[]=;,'\"`",
]


def _fn(k: int) -> Any:
    return lambda x: x * (k + 2)


def hostile_trace(tmp: Path, names: Sequence[str] = HOSTILE, planted: Optional[Sequence[str]] = None) -> Any:
    """A sim run through functions named `names` (warm-ups, records, replays, a generation),
    saved as tmp/hostile.cgtrace.json, every other text field planted with one of `planted`
    (default: `names`), and loaded back."""
    planted = list(planted or names)
    tree = cgviz.Tree("sim", profile=True)
    fns = [tree.wrap(_fn(k), name=name) for k, name in enumerate(names)]
    x = torch.ones(4)
    for _ in range(3):
        y = x
        for f in fns:
            y = f(y)
    tree.mark_step()
    y = x
    for f in fns[:2]:
        y = f(y)
    path = tmp / "hostile.cgtrace.json"
    tree.trace.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    k = 0

    def next_one() -> str:
        nonlocal k
        k += 1
        return planted[k % len(planted)]

    for step in data["steps"]:
        step["reason"] = f"{step['reason']} · {next_one()}"
    tables = data["tables"]
    for node in tables["nodes"]:
        node["signature"] = f"({next_one()}[4])"
    for out in tables["outputs"]:
        out["dtype"] = next_one()
    for block in tables["blocks"]:
        if block.get("allocated"):
            block["owner"] = next_one()
    meta = data["meta"]
    meta["scenario"], meta["backend"] = planted[0], planted[-1]
    for j, s in enumerate(planted):
        meta[f"note {j} {s}"] = s
    for entry in (meta.get("profile") or {}).values():
        entry["function"] = next_one()
        entry["kernels"] = [[s, j + 1] for j, s in enumerate(planted)]
    path.write_text(json.dumps(data), encoding="utf-8")
    return cgviz.Trace.load(path)
