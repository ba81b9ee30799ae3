"""The HTML export's trees with the built-in layout: drawn once per structure, each step's node
states applied by the page's script. Run in Chromium, the tree shown at each step must show
what `builtin_tree_svg` draws for that step: node classes, colours, texts (replay counts,
badges, output marks), the current node and the path's edges."""

from __future__ import annotations

import html
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from cgviz.scenarios import run_scenario
from cgviz.trace.model import Trace
from cgviz.views.html import to_html
from cgviz.views.tree.frames import KEYFRAME
from cgviz.views.tree import builtin_tree_svg
from test_html import page_data

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
SVG = "{http://www.w3.org/2000/svg}"

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium to run the page's script")

# visits the steps of PLAN (▶ where the next one follows, else a slider jump) and records what the
# tree shows: per node its class, fill, box and texts; the edges on the path. FIT: the tree shrunk
# to the panel's width (it may still be taller). After each step the panel is scrolled over the
# whole tree (the page paints nodes as they come into view)
PROBE = r"""<script>
window.addEventListener("load", function () { window.cgvizReady.then(run); });
function run() {
  var plan = PLAN, out = [], S = document.querySelector(".cg-slider"), box = document.querySelector(".cg-tree-box");
  function attrs(e, names) { return names.map(function (n) { return e.getAttribute(n); }); }
  function scan() {
    for (var y = 0; y <= box.scrollHeight; y += box.clientHeight / 2)
      for (var x = 0; x <= box.scrollWidth; x += box.clientWidth / 2) { box.scrollLeft = x; box.scrollTop = y; box.dispatchEvent(new Event("scroll")); }
  }
  if (FIT) document.querySelector(".cg-fit").click();
  for (var k = 0; k < plan.length; k++) {
    var i = plan[k];
    if (i === +S.value + 1) document.querySelector(".cg-next").click();
    else { S.value = i; S.dispatchEvent(new Event("input")); }
    scan();
    var nodes = {}, hot = [];
    document.querySelectorAll('.cg-tree-box g[id^="node-"]').forEach(function (g) {
      var cls = g.getAttribute("class").split(" ").filter(function (c) { return c !== "cg-sel"; }).join(" ");
      var rect = g.querySelector("rect:not([x])");
      nodes[g.id] = [cls, g.getAttribute("fill"), attrs(rect, ["height", "fill", "stroke", "stroke-width", "stroke-dasharray"]),
        Array.prototype.map.call(g.querySelectorAll("text"), function (t) { return [t.textContent, t.getAttribute("fill")]; })];
    });
    document.querySelectorAll('.cg-tree-box g.cgviz-edge.on-path').forEach(function (e) { hot.push(e.id); });
    out.push({step: +S.value, nodes: nodes, hot: hot.sort(), edges: document.querySelectorAll(".cg-tree-box g.cgviz-edge").length});
  }
  document.body.setAttribute("data-check", JSON.stringify(out));
}
</script>
</body>"""


def shown(page: str, plan: list[int], fit: bool) -> list[dict]:
    """What the page's tree shows at each step of `plan`, in headless Chromium."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "page.html"
        path.write_text(page.replace("</body>", PROBE.replace("PLAN", json.dumps(plan)).replace("FIT", json.dumps(fit))), encoding="utf-8")
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", "--disable-sync", f"--user-data-dir={tmp}/profile",
               "--window-size=1400,1000", "--virtual-time-budget=30000", "--dump-dom", f"file://{path}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    found = re.search(r'data-check="([^"]*)"', done.stdout)
    assert found, done.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def expected(trace: Trace, i: int) -> dict:
    """The same, from the SVG `builtin_tree_svg` draws for step i."""
    step = trace.steps[i]
    root = ET.fromstring(builtin_tree_svg(step.snapshot, step))
    nodes, hot, edges = {}, [], 0
    for g in root.iter(f"{SVG}g"):
        gid = g.get("id", "")
        if gid.startswith("node-"):
            rect = next(r for r in g.findall(f"{SVG}rect") if r.get("x") is None)
            texts = [["".join(t.itertext()), t.get("fill")] for t in g.findall(f"{SVG}text")]
            nodes[gid] = [g.get("class"), g.get("fill"),
                          [rect.get(k) for k in ("height", "fill", "stroke", "stroke-width", "stroke-dasharray")],
                          texts]
        elif gid.startswith("edge-"):
            edges += 1
            if "on-path" in g.get("class", "").split():
                hot.append(gid)
    return {"step": i, "nodes": nodes, "hot": sorted(hot), "edges": edges}


def synthetic(**kw):
    """The render benchmark's synthetic trace (a growing tree, then replay loops), and its facts."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from render import synthetic_trace
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return synthetic_trace(**kw)


def check(trace: Trace, plan: list[int], fit: bool = True) -> None:
    page = to_html(trace, renderer="builtin")
    got = shown(page, plan, fit)
    assert [g["step"] for g in got] == plan
    for g in got:
        want = expected(trace, g["step"])
        assert g["nodes"].keys() == want["nodes"].keys(), g["step"]
        for k, v in want["nodes"].items():
            assert g["nodes"][k] == v, (g["step"], k)
        assert g["hot"] == want["hot"] and g["edges"] == want["edges"], g["step"]


@pytest.mark.parametrize("name", ["branching", "generations", "fwd_bwd"])
def test_each_step_of_a_scenario_shows_its_states(name):
    trace = run_scenario(name, "sim").trace
    n = len(trace.steps)
    plan = list(range(n)) + [n - 1, 0, n // 2, 3, n - 2, 1]
    check(trace, plan)


def test_steps_without_a_snapshot_between_others():
    base = run_scenario("branching", "sim").trace
    steps = [replace(s, snapshot=None) if s.index in (3, 4, 9) else s for s in base.steps]
    trace = Trace(steps=steps, meta=base.meta)
    page = to_html(trace, renderer="builtin")
    plan = [0, 1, 2, 3, 4, 5, 6, 3, 7, 1, 4, 8, 9, 10, 12]
    got = shown(page, plan, True)
    for g in got:
        if trace.steps[g["step"]].snapshot is None:
            assert g["nodes"] == {} and g["edges"] == 0, g["step"]
        else:
            assert {k: v for k, v in g.items() if k != "step"} == {
                k: v for k, v in expected(trace, g["step"]).items() if k != "step"}, g["step"]


def test_jumps_across_keyframes_show_the_steps_states():
    trace, _ = synthetic(nodes=40, steps=3 * KEYFRAME + 50, variants=4)
    n = len(trace.steps)
    rng = random.Random(1)
    plan = [0, 1, 2, KEYFRAME - 1, KEYFRAME, KEYFRAME + 1, n - 1, 5, 6, 7] + rng.sample(range(n), 25)
    plan += [plan[-1] + 1] if plan[-1] + 1 < n else []
    check(trace, plan)


def test_nodes_out_of_view_are_painted_when_scrolled_to():
    trace, _ = synthetic(nodes=40, steps=2 * KEYFRAME + 30, variants=4)
    n = len(trace.steps)
    check(trace, [n - 1, n // 2, n // 2 + 1, 3, KEYFRAME + 7], fit=False)


def test_the_page_stores_each_structure_once_and_small_deltas():
    trace, info = synthetic(nodes=40, steps=600, variants=4)
    data = page_data(to_html(trace, renderer="builtin"))
    tree = data["tree"]
    # one drawing per structure: each recording step adds a node; the generation step before the
    # first has none; the replays share the last
    assert len(tree["structs"]) == info["nodes"] + 1
    assert len(data["trees"]) == len(tree["structs"])
    # a replay changes two nodes (the one that was current, and the one replaying now)
    assert statistics.median(len(d) for d in tree["delta"][info["nodes"] * 2:]) == 3 * 2
    assert sorted(int(k) for k in tree["keys"]) == list(range(0, len(trace.steps), KEYFRAME))


def test_a_pool_that_grows_a_block_a_step_stores_each_segment_once_per_content():
    trace, _ = synthetic(nodes=40, steps=300, variants=4)
    data = page_data(to_html(trace, renderer="builtin"))
    distinct = {(s.address, tuple((b.address, b.size, b.allocated, b.node, b.output, b.owner) for b in s.blocks))
                for step in trace.steps if step.snapshot for s in step.snapshot.segments}
    assert len(data["segs"]) <= len(distinct)
    # a pool lists its segments by index: the recording phase's pools share all rows but one
    rows = [p[2] for p in data["pools"]]
    assert sum(len(set(a) ^ set(b)) <= 2 for a, b in zip(rows, rows[1:])) > len(rows) / 2
