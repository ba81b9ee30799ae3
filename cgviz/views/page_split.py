"""A long trace's page payload in two parts: the first steps' pictures, then the rest.

A page decodes its payload before it can show anything, and a long trace's payload is tens of
megabytes of JSON. So the page carries the head and the pictures of its first steps as one part,
shows them, and only then decodes the rest (views/page/page.html): the first view does not wait
for the whole trace.

The whole payload's lists only ever grow as its steps are built in order (`PageData.piece`), so
what the first steps need is a prefix of each list: `FirstCut` says how long, and the rest is the
suffix, merged by the front end as a widget's pieces are (`mergePiece`: lists appended, step
records and tree states filled in by step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FirstCut", "split_whole", "join_parts", "FIRST_STEPS"]

#: How many steps' pictures come in a page's first part: the steps shown first (▶ from step 1).
FIRST_STEPS = 50


@dataclass
class FirstCut:
    """Where the pictures of a whole payload's first `steps` steps end: in each list
    (``lines``, ``trees``, ``nodes``, ...), and among the tree states' structures and looks."""

    steps: int
    lists: dict[str, int] = field(default_factory=dict)
    structs: int = 0
    looks: int = 0


def split_whole(payload: dict, cut: FirstCut) -> tuple[dict, dict]:
    """A whole payload (`page_data.page_whole`) as its first part and the rest: the step records,
    the tree states and the lists `cut` names are cut where it says; the rest's step records and
    tree deltas keep their steps' places (None before them), its tree keyframes are those of its
    own steps. All else (the head) is the first part's."""
    m = cut.steps
    first = {k: v for k, v in payload.items() if k not in ("steps", "tree") and k not in cut.lists}
    steps = payload["steps"]
    first["steps"], rest = steps[:m], {"steps": [None] * m + steps[m:]}
    for name, n in cut.lists.items():
        items = payload[name]
        first[name], rest[name] = items[:n], items[n:]
    tree = payload.get("tree")
    if tree is not None:
        keys, delta = tree["keys"], tree["delta"]
        first["tree"] = {"structs": tree["structs"][:cut.structs], "looks": tree["looks"][:cut.looks],
                         "delta": delta[:m], "keys": {k: v for k, v in keys.items() if int(k) < m},
                         "every": tree["every"]}
        rest["tree"] = {"structs": tree["structs"][cut.structs:], "looks": tree["looks"][cut.looks:],
                        "delta": [None] * m + delta[m:], "keys": {k: v for k, v in keys.items() if int(k) >= m},
                        "every": tree["every"]}
    return first, rest


def join_parts(first: dict, rest: dict) -> dict:
    """The whole payload again from a page's two parts (what the front end's merge makes of them),
    for tools that read a page's payload."""
    whole = dict(first)
    m = len(first["steps"])
    whole["steps"] = first["steps"] + rest["steps"][m:]
    for name, items in rest.items():
        if name not in ("steps", "tree"):
            whole[name] = first.get(name, []) + items
    if "tree" in rest:
        a, b = first["tree"], rest["tree"]
        whole["tree"] = {"structs": a["structs"] + b["structs"], "looks": a["looks"] + b["looks"],
                         "delta": a["delta"] + b["delta"][m:], "keys": {**a["keys"], **b["keys"]}, "every": a["every"]}
    return whole
