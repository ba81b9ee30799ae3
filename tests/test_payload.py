"""The explorer's payload is declared once (views/payload.py) and read by name: the page's payload,
decoded by the front end's own code under Node, is what page_data builds read by those names,
and every name holds what the trace says it should."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Optional

import pytest

import cgviz
from cgviz.data import ddp_traces, graph_trace
from cgviz.scenarios import run_scenario
from cgviz.trace.io import load_trace
from cgviz.views.html import page_payload, to_html
from cgviz.views.page_data import PageData, page_data
from cgviz.views.payload import BLOCK, FIELDS, NODE_STATE, ROW, STEP, Record

ROOT = Path(__file__).resolve().parents[1]
LOGIC = ROOT / "cgviz" / "views" / "page" / "explorer_logic.js"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node not found (apt install nodejs)")

# the front end's decoding of a payload, as explorer.js does it: the head, then the piece it carries
DECODE_JS = """
const L = require(process.argv[1]);
let text = "";
process.stdin.on("data", (d) => { text += d; }).on("end", () => {
  const raw = JSON.parse(text);
  process.stdout.write(JSON.stringify({head: L.decodeHead(raw), piece: L.decodePiece(raw.fields, raw)}));
});
"""


def traces() -> dict[str, tuple[Any, str]]:
    """Traces whose pages use every part of the payload, and the renderer each is drawn with:
    tree states, folded repeats and a profile (sim training), whole drawings, ranks' trees side
    by side, and CUDA graphs made outside the trees."""
    return {
        "training": (run_scenario("training", "sim").trace, "builtin"),
        "branching": (run_scenario("branching", "sim").trace, "auto"),
        "ddp": (cgviz.merge([load_trace(p) for p in ddp_traces("planted")]), "builtin"),
        "graphs": (graph_trace("serving_runner"), "builtin"),
    }


def decoded_by_node(payload: dict) -> dict:
    done = subprocess.run([NODE, "-e", DECODE_JS, str(LOGIC)], input=json.dumps(payload), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


# -- the payload read by name, in Python -----------------------------------------------------------
def named(name: str, rec: Optional[list]) -> Optional[dict]:
    """A record by the names the head declares (fields left out at the end: None)."""
    if rec is None:
        return None
    fields = FIELDS[name]
    assert len(rec) <= len(fields), f"a {name} record has more values than fields: {rec!r}"
    return {k: rec[j] if j < len(rec) else None for j, k in enumerate(fields)}


def by_name(raw: dict) -> dict:
    """What the front end should make of `raw` (a head with its piece), read by name here."""
    head = dict(raw)
    head["header"] = {**raw["header"], "meta": [named("meta", r) for r in raw["header"]["meta"]],
                      "kinds": [named("kind_count", r) for r in raw["header"]["kinds"]]}
    head["rows"] = [named("row", r) for r in raw["rows"]]
    head["profile"] = {k: {"time": v["time"], "kernels": [named("kernel", r) for r in v["kernels"]]}
                       for k, v in raw["profile"].items()}
    at = {str(i): named("step", r) for i, r in enumerate(raw.get("steps", [])) if r is not None}
    at.update({k: named("step", r) for k, r in raw.get("at", {}).items()})
    piece = {k: raw.get(k, []) for k in ("lines", "trees", "snaps", "banners", "ptexts")}
    piece["nodes"] = [{**named("node", r), "outputs": [named("output", o) for o in r[FIELDS["node"].index("outputs")]]}
                      for r in raw.get("nodes", [])]
    for k, name in (("segs", "seg"), ("pstyles", "pstyle"), ("pools", "pool")):
        piece[k] = [named(name, r) for r in raw.get(k, [])]
    piece["legends"] = [[named("legend", r) for r in entries] for entries in raw.get("legends", [])]
    piece["at"] = at
    tree = raw.get("tree")
    if tree is not None:
        delta = tree["delta"]
        piece["tree"] = {"structs": [named("struct", r) for r in tree["structs"]],
                         "looks": [named("look", r) for r in tree["looks"]], "keys": tree["keys"],
                         "delta": {str(i): d for i, d in enumerate(delta)} if isinstance(delta, list) else delta}
    return {"head": head, "piece": piece}


def flat(rec: Record, values: list) -> list[dict]:
    size = len(rec.fields)
    assert len(values) % size == 0
    return [dict(zip(rec.fields, values[k:k + size])) for k in range(0, len(values), size)]


def runs(r: list[int]) -> list[int]:
    return [j for a, n in zip(r[::2], r[1::2]) for j in range(a, a + n)]


# -- the tests ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=list(traces()))
def exported(request: Any) -> tuple[Any, dict, dict]:
    """A trace, the payload of its page exported now, and what page_data builds for it."""
    trace, renderer = traces()[request.param]
    return trace, page_payload(to_html(trace, renderer=renderer)), page_data(trace, renderer=renderer)


def test_the_tests_of_the_front_end_use_the_declared_fields() -> None:
    """tests/js/fixture.mjs writes the fields out for Node: they are these."""
    if NODE is None:
        pytest.skip("node not found (apt install nodejs)")
    fixture = (ROOT / "tests" / "js" / "fixture.mjs").as_uri()
    done = subprocess.run([NODE, "--input-type=module", "-e",
                           f"import({json.dumps(fixture)}).then((m) => console.log(JSON.stringify(m.FIELDS)))"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == FIELDS


def test_the_page_carries_what_page_data_builds_and_the_field_names(exported: Any) -> None:
    _trace, payload, built = exported
    assert payload == json.loads(json.dumps(built))
    assert payload["fields"] == FIELDS


@needs_node
def test_the_front_end_decodes_the_page_by_the_declared_names(exported: Any) -> None:
    _trace, payload, _built = exported
    assert decoded_by_node(payload) == json.loads(json.dumps(by_name(payload)))


@needs_node
def test_the_front_end_decodes_a_widgets_pieces_by_the_declared_names() -> None:
    trace = run_scenario("training", "sim").trace
    data = PageData(trace, renderer="builtin")
    n = len(trace.steps)
    for steps in (range(0, n // 2), range(n // 2, n)):  # the second piece names only what is new
        raw = {**data.head(), **data.window(steps)}
        assert isinstance(raw["tree"]["delta"], dict)
        assert decoded_by_node(raw) == json.loads(json.dumps(by_name(raw)))


def test_every_name_holds_what_the_trace_says(exported: Any) -> None:
    """Read by name, each record says what its step, node, output, pool and tree state are."""
    trace, payload, _built = exported
    data = by_name(payload)
    head, piece = data["head"], data["piece"]
    steps = trace.steps
    times = trace.repeats()
    assert [(r["kind"], r["headline"], r["reason"], r["times"], r["graph"]) for r in head["rows"]] == \
        [(s.kind, s.headline(), s.reason, times[i], s.graph) for i, s in enumerate(steps)]
    if any(t > 1 for t in times):
        assert any(r["note"] for r in head["rows"]), "a folded block's steps say where they sit in it"
    assert set(piece["at"]) == {str(i) for i in range(len(steps))}
    nodes, pstyles, ptexts = piece["nodes"], piece["pstyles"], piece["ptexts"]
    for i, step in enumerate(steps):
        rec = piece["at"][str(i)]
        assert rec["node"] == step.node
        if step.snapshot is None:
            assert rec["snap"] == rec["pool"] == -1
            continue
        snap = piece["snaps"][rec["snap"]]
        assert snap["cur"] == step.snapshot.current_node and snap["path"] == list(step.snapshot.path)
        shown = {nodes[j]["id"]: nodes[j] for j in runs(snap["n"])}
        assert set(shown) == {n.id for n in step.snapshot.nodes}
        for n in step.snapshot.nodes:
            got = shown[n.id]
            assert (got["function"], got["kind"], got["parent"], got["children"], got["generation"], got["replays"],
                    got["signature"]) == (n.function, n.kind, n.parent, list(n.children), n.generation, n.replays,
                                          n.signature)
            assert [(o["index"], o["state"]) for o in got["outputs"]] == [(o.index, o.state) for o in n.outputs]
        pool = piece["pools"][rec["pool"]]
        assert pool["title"] and isinstance(pool["subtitle"], str) and pool["widened"] in (0, 1)
        for entry in piece["legends"][pool["legend"]]:
            assert 0 <= entry["style"] < len(pstyles) and isinstance(entry["text"], str)
        ids = {n.id for n in step.snapshot.nodes}
        for s in pool["segs"]:
            seg = piece["segs"][s]
            assert isinstance(seg["label"], str)
            for b in flat(BLOCK, seg["blocks"]):
                assert 0 <= b["x"] and b["x"] + b["width"] <= 10000 + 1
                assert 0 <= b["style"] < len(pstyles) and b["tip"] < len(ptexts) and b["labels"] < len(ptexts)
                assert b["node"] == -1 or b["node"] in ids
    for p in pstyles:
        assert isinstance(p["category"], str)
    tree = piece.get("tree")
    if tree is not None:
        for s in tree["structs"]:
            assert 0 <= s["tree"] < len(piece["trees"]) and 0 <= s["first"] < len(steps)
        for look in tree["looks"]:
            assert "\ue000" in look["count_template"] and isinstance(look["count_at"], int)
        every_node = {n.id for s in steps if s.snapshot is not None for n in s.snapshot.nodes}
        for states in list(tree["keys"].values()) + list(tree["delta"].values()):
            for st in flat(NODE_STATE, states):
                assert st["node"] in every_node and -1 <= st["look"] < len(tree["looks"]) and st["replays"] >= 0


def test_a_record_is_made_by_name() -> None:
    assert STEP.pack(banner=-1, node=3, snap=2, pool=1, tree=0) == [0, 1, 2, 3, -1]
    assert ROW.pack(kind="execute", headline="h", reason="r", note="", times=1, graph=None) == ["execute", "h", "r", "", 1]
    assert ROW.pack(kind="execute", headline="h", reason="r", note="", times=1, graph=2)[-1] == 2
    with pytest.raises(TypeError, match="tree, pool, snap, node, banner"):
        STEP.pack(tree=0, pool=1, snap=2, node=3)


# -- the payload before it was declared ----------------------------------------------------------
BEFORE = ROOT / "tests" / "data" / "payload_before_declared.json.gz"
# keys the payload gained since: the declared field names, the timeline's step band and its lanes' names
ADDED_SINCE = {"fields", "tband", "tnames"}


def css_properties(css: str) -> dict[str, str]:
    return dict(item.split(":", 1) for item in css.split(";") if item)


@pytest.mark.parametrize("name", sorted(json.loads(gzip.decompress(BEFORE.read_bytes()))))
def test_the_payload_is_the_one_before_it_was_declared(name: str) -> None:
    """The pages of the old-layout traces, exported by cgviz before its payload was declared
    (commit 81d2966, positional records read by position), carry what they carry now: the same
    records in the same places, and the same colours (now with more of them)."""
    before = json.loads(gzip.decompress(BEFORE.read_bytes()))[name]
    now = page_payload(to_html(load_trace(ROOT / "tests" / "data" / "old_layout" / name), renderer="builtin"))
    assert set(now) - set(before) == ADDED_SINCE
    old_css, new_css = css_properties(before.pop("css")), css_properties(now.pop("css"))
    assert old_css.items() <= new_css.items()
    # the findings are the doctor's words, which its own tests hold (they have been put right since
    # for a tree's mark_step()): here, that the page carries them in the same places
    old_findings, new_findings = before.pop("findings"), now.pop("findings")
    # (and the steps they name: an overwritten output's generation step is the one that invalidated it)
    assert [(f["severity"], f["step"], len(f["steps"])) for f in new_findings] == [
        (f["severity"], f["step"], len(f["steps"])) for f in old_findings]
    assert [sorted(f) for f in new_findings] == [sorted(f) for f in old_findings]
    # so are the generation banners' heads (the views' words, held by test_text): the same banners,
    # with the same outputs
    old_banners, new_banners = before.pop("banners"), now.pop("banners")
    assert [b["items"] for b in new_banners] == [b["items"] for b in old_banners]
    assert [b["head"].split(":")[0] for b in new_banners] == [b["head"].split(":")[0] for b in old_banners]
    # the header's count says "with repeats" now, as the timeline does: the same numbers
    old_count, new_count = before["header"].pop("count"), now["header"].pop("count")
    assert re.findall(r"\d+", new_count) == re.findall(r"\d+", old_count)
    assert {k: v for k, v in now.items() if k not in ADDED_SINCE} == before
    if NODE is not None:  # the front end reads the old payload by the names declared now, as it reads the new one
        decoded_old, decoded_now = decoded_by_node({**before, "fields": now["fields"]}), decoded_by_node(now)
        for part in ("head", "piece"):
            for key in ADDED_SINCE:
                decoded_now[part].pop(key, None)
                decoded_old[part].pop(key, None)
        assert decoded_old == decoded_now


def test_the_header_counts_steps_and_decisions_with_repeats_as_the_timeline_does() -> None:
    """Generations and path ends are decisions, not calls: the header says what the timeline says."""
    trace = run_scenario("generations", device="sim").trace
    assert PageData(trace, renderer="builtin").head()["header"]["count"] == "11 steps (14 with repeats)"


def test_the_head_names_the_timelines_lanes_where_it_has_several() -> None:
    """The page keeps the timeline's lane names in sight when it scrolls sideways (explorer.js,
    `placeNames`): the head says each lane's name and height, within the steps' band, top down."""
    merged = cgviz.merge([load_trace(p) for p in ddp_traces("planted")])
    head = PageData(merged, renderer="builtin").head()
    lanes, (top, bottom) = head["tnames"]["lanes"], head["tband"]
    assert [name for _, name in lanes] == ["rank 0", "rank 1"]
    assert top < lanes[0][0] < lanes[1][0] < 1 - bottom
    assert 0 < head["tnames"]["left"] < 0.2
    assert PageData(run_scenario("chain", "sim").trace).head()["tnames"] == {}  # one lane, named by none
