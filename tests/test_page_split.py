"""A long trace's page comes in two parts: the first steps' pictures, shown before the rest is
decoded. The first part must hold everything its steps show (found here by following each step's
references, independently of how the export cut it), the two parts must make the whole payload
again (in Python, and merged by the front end's own code under Node), and in Chromium the first
steps must show what the whole page shows before the rest arrives."""

from __future__ import annotations

import html
import json
import re
import subprocess

import pytest

from cgviz.views.html import page_parts, to_html
from cgviz.views.page_data import page_whole
from cgviz.views.page_split import FIRST_STEPS, join_parts, split_whole
from cgviz.views.payload import BLOCK, FIELDS, LEGEND, NODE_STATE, POOL, SEG, STEP
from cgviz.views.tree import dot_available
from test_html import chromium_dom
from test_html_tree_states import CHROMIUM, expected, shown, synthetic
from test_payload import LOGIC, NODE, needs_node

LISTS = ("lines", "trees", "nodes", "snaps", "banners", "segs", "pstyles", "ptexts", "legends", "pools")


def field(record, at: int, name: str, fields: list[str]):
    return record[at + fields.index(name)]


def runs(item: list[int]) -> list[int]:
    return [j for a, n in zip(item[::2], item[1::2]) for j in range(a, a + n)]


def needed(payload: dict, steps: range) -> dict[str, set[int]]:
    """Every index of each list that `steps` show, found by following their records: the tree (a
    structure's drawing, or a step's own), the node states up to each step (their looks), the
    pool (its segments' blocks, styles and texts, its legend), the snapshot's nodes, the banner."""
    need: dict[str, set[int]] = {k: set() for k in (*LISTS, "structs", "looks")}
    tree = payload.get("tree")
    state: dict[int, int] = {}
    for i in steps:
        rec = dict(zip(STEP.fields, payload["steps"][i]))
        if tree is not None:  # the node states after step i, as the front end works them out
            if str(i) in tree["keys"]:
                flat = tree["keys"][str(i)]
                state = {flat[j]: flat[j + 1] for j in range(0, len(flat), len(NODE_STATE.fields))}
            else:
                d = tree["delta"][i]
                for j in range(0, len(d), len(NODE_STATE.fields)):
                    if d[j + 1] < 0:
                        state.pop(d[j], None)
                    else:
                        state[d[j]] = d[j + 1]
            need["looks"].update(state.values())
        if rec["tree"] >= 0:
            drawing = rec["tree"]
            if tree is not None:
                need["structs"].add(rec["tree"])
                drawing = tree["structs"][rec["tree"]][0]
            need["trees"].add(drawing)
            need["lines"].update(runs(payload["trees"][drawing]))
        if rec["pool"] >= 0:
            need["pools"].add(rec["pool"])
            pool = dict(zip(POOL.fields, payload["pools"][rec["pool"]]))
            for s in pool["segs"]:
                need["segs"].add(s)
                blocks = payload["segs"][s][SEG.fields.index("blocks")]
                for k in range(0, len(blocks), len(BLOCK.fields)):
                    need["pstyles"].add(field(blocks, k, "style", FIELDS["block"]))
                    need["ptexts"].update((field(blocks, k, "tip", FIELDS["block"]), field(blocks, k, "labels", FIELDS["block"])))
            need["legends"].add(pool["legend"])
            need["pstyles"].update(e[LEGEND.fields.index("style")] for e in payload["legends"][pool["legend"]])
        if rec["snap"] >= 0:
            need["snaps"].add(rec["snap"])
            need["nodes"].update(runs(payload["snaps"][rec["snap"]]["n"]))
        if rec["banner"] >= 0:
            need["banners"].add(rec["banner"])
    return need


def long_traces():
    yield "tree states", synthetic(nodes=40, steps=300, variants=4)[0], "builtin"
    if dot_available():
        yield "drawings", synthetic(nodes=12, steps=120, variants=2)[0], "graphviz"


@pytest.mark.parametrize("name,trace,renderer", list(long_traces()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_first_part_holds_what_its_steps_show_and_no_more(name, trace, renderer) -> None:
    whole, cut = page_whole(trace, renderer=renderer)
    assert cut is not None and cut.steps == FIRST_STEPS < len(trace.steps)
    first, rest = split_whole(whole, cut)
    need = needed(whole, range(FIRST_STEPS))
    assert need["lines"] and need["pools"] and need["nodes"], "the first steps show trees, pools and nodes"
    for k in LISTS:  # each list's first part is what the first steps need: a prefix, none left out
        assert len(first[k]) == max(need[k], default=-1) + 1, k
    if name == "tree states":
        for k in ("structs", "looks"):
            assert len(first["tree"][k]) == max(need[k]) + 1, k
        assert sorted(map(int, first["tree"]["keys"])) == [k for k in range(FIRST_STEPS) if str(k) in whole["tree"]["keys"]]
    else:
        assert "tree" not in whole
    assert first["steps"] == whole["steps"][:FIRST_STEPS] and rest["steps"][FIRST_STEPS:] == whole["steps"][FIRST_STEPS:]
    assert join_parts(first, rest) == whole


def test_a_trace_of_few_steps_is_not_cut() -> None:
    trace, _ = synthetic(nodes=8, steps=FIRST_STEPS, variants=2)
    whole, cut = page_whole(trace, renderer="builtin")
    assert cut is None
    page = to_html(trace, renderer="builtin")
    assert 'id="cgviz-rest"' not in page and 'id="cgviz-data"' in page


def test_a_long_traces_page_carries_its_first_steps_first() -> None:
    trace, _ = synthetic(nodes=40, steps=300, variants=4)
    page = to_html(trace, renderer="builtin")
    first, rest = page_parts(page)
    whole, _ = page_whole(trace, renderer="builtin")
    assert first["n"] == len(trace.steps) and len(first["rows"]) == len(trace.steps)  # the head: every step's row
    assert [s is not None for s in rest["steps"]] == [False] * FIRST_STEPS + [True] * (len(trace.steps) - FIRST_STEPS)
    assert join_parts(first, rest) == json.loads(json.dumps(whole))


# the model the front end makes of a whole payload, and of its two parts merged in turn (the page's
# way); then every step's record and tree state as each model gives them
MERGE_JS = """
const L = require(process.argv[1]);
let text = "";
process.stdin.on("data", (d) => { text += d; }).on("end", () => {
  const {whole, first, rest} = JSON.parse(text);
  const model = (parts) => {
    const m = L.newModel(parts[0].fields);
    L.applyHead(m, L.decodeHead(parts[0]));
    const filled = parts.map((p) => L.mergePiece(m, L.decodePiece(m.fields, p)).length);
    const shown = [];
    for (let i = 0; i < m.n; i++) {
      const s = L.stepAt(m, i);
      shown.push({rec: s.rec, tree: s.tree, snap: s.snap, banner: s.banner,
                  state: m.tree && s.rec ? L.treeStateAt(m.tree, m.fields, i, {state: null, at: -1}) : null});
    }
    return {filled, shown, model: m};
  };
  const a = model([whole]), b = model([first, rest]), c = model([first]);
  const loaded = c.shown.map((s) => s.rec !== null);
  process.stdout.write(JSON.stringify({same: JSON.stringify(a.model) === JSON.stringify(b.model),
    sameShown: JSON.stringify(a.shown) === JSON.stringify(b.shown), filled: b.filled, loaded,
    firstShown: JSON.stringify(a.shown.slice(0, loaded.indexOf(false))) === JSON.stringify(c.shown.slice(0, loaded.indexOf(false)))}));
});
"""


@needs_node
def test_the_front_end_merges_the_parts_into_the_whole() -> None:
    trace, _ = synthetic(nodes=40, steps=300, variants=4)
    whole, cut = page_whole(trace, renderer="builtin")
    first, rest = split_whole(whole, cut)
    done = subprocess.run([NODE, "-e", MERGE_JS, str(LOGIC)], input=json.dumps({"whole": whole, "first": first, "rest": rest}),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    n = len(trace.steps)
    assert got["filled"] == [FIRST_STEPS, n - FIRST_STEPS]
    assert got["same"] and got["sameShown"]
    assert got["loaded"] == [True] * FIRST_STEPS + [False] * (n - FIRST_STEPS)  # the first part alone: its steps
    assert got["firstShown"]


# once the first view is shown, before the rest is decoded: a jump past the first steps waits
# ("loading"), and shows its step once every step's pictures are in. Put first in the page's head,
# so that its callback on `cgvizShown` runs before the page's own, which starts on the rest
ORDER_PROBE = r"""<head><script>
(function () {
  var shown, out = {};
  Object.defineProperty(window, "cgvizShown", {configurable: true, get: function () { return shown; }, set: function (p) {
    shown = p;
    p.then(function () {
      var root = document.querySelector(".cgviz"), S = root.querySelector(".cg-slider");
      out.shownFirst = root.querySelector(".cg-tree-box svg") !== null;
      S.value = JUMP; S.dispatchEvent(new Event("input"));
      out.waiting = root.classList.contains("loading");
      return window.cgvizReady.then(function () {
        out.after = !root.classList.contains("loading") && +S.value === JUMP && root.querySelector(".cg-tree-box svg") !== null;
        document.body.setAttribute("data-check", JSON.stringify(out));
      });
    });
  }});
})();
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium to run the page's script")
def test_the_page_shows_its_first_steps_before_the_rest_is_decoded(tmp_path) -> None:
    trace, _ = synthetic(nodes=40, steps=300, variants=4)
    page = to_html(trace, renderer="builtin")
    # without its second part, the page still shows each of its first steps as the whole page draws it
    alone = re.sub(r'<script type="[^"]+" id="cgviz-rest"[^>]*>.*?</script>', "", page, flags=re.S)
    assert alone != page
    plan = list(range(FIRST_STEPS)) + [3, FIRST_STEPS - 1, 0]
    for got in shown(alone, plan, True):
        want = expected(trace, got["step"])
        assert got["nodes"] == want["nodes"] and got["hot"] == want["hot"] and got["edges"] == want["edges"], got["step"]
    # opened at a step past them, it says the step's pictures are coming; the whole page shows them
    far = len(trace.steps) - 20
    (tmp_path / "alone.html").write_text(alone, encoding="utf-8")
    (tmp_path / "whole.html").write_text(page, encoding="utf-8")
    waiting = chromium_dom(tmp_path / "alone.html", f"#step={far + 1}")
    loading = '<p class="msg">Loading the pictures of this step…</p>'
    assert loading in waiting and f"step {far + 1} / {len(trace.steps)}" in waiting
    whole = chromium_dom(tmp_path / "whole.html", f"#step={far + 1}")
    assert loading not in whole and 'id="node-' in whole
    # the whole page: a jump past the first steps made as soon as they are shown waits for the rest
    jump = len(trace.steps) - 7
    path = tmp_path / "page.html"
    path.write_text(page.replace("<head>", ORDER_PROBE.replace("JUMP", str(jump)), 1), encoding="utf-8")
    dom = chromium_dom(path)
    found = re.search(r'data-check="([^"]*)"', dom)
    assert found, dom[-2000:]
    assert json.loads(html.unescape(found.group(1))) == {"shownFirst": True, "waiting": True, "after": True}
