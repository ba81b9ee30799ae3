"""The HTML export: one self-contained page per trace, every step precomputed, nothing fetched."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

import cgviz
from cgviz.cli import main
from cgviz.data import gpu_trace, gpu_trace_names
from cgviz.scenarios import SCENARIOS, run_scenario
from cgviz.trace.model import NodeView, OutputView, Snapshot, Step, Trace
from cgviz.views.html import page_payload, to_html
from cgviz.views.tree import dot_available

ROOT = Path(__file__).resolve().parents[1]
DATA_TAG = '<script type="application/json" id="cgviz-data">'
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


# -- reading a page ------------------------------------------------------------------------------
class PageParser(HTMLParser):
    """Checks that every element is closed in order and collects the scripts and attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.scripts: dict[str, str] = {}
        self.attrs: list[tuple[str, str, str]] = []
        self.text: list[str] = []
        self._script: str | None = None

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            self.attrs.append((tag, k, v or ""))
        if tag == "script":
            self._script = dict(attrs).get("id") or f"script{len(self.scripts)}"
            self.scripts[self._script] = ""
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        for k, v in attrs:
            self.attrs.append((tag, k, v or ""))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()
        if tag == "script":
            self._script = None

    def handle_data(self, data):
        if self._script is not None:
            self.scripts[self._script] += data
        else:
            self.text.append(data)


def parse(page: str) -> PageParser:
    p = PageParser()
    p.feed(page)
    p.close()
    assert p.problems == [], p.problems[:5]
    assert p.stack == [], p.stack
    return p


def page_data(page: str) -> dict:
    """The payload a page carries (`html.page_payload`), once the page parses cleanly."""
    parse(page)
    return page_payload(page)


def line_indices(data: dict, kind: str) -> list[list[int]]:
    """Each stored SVG's line indices, from its runs over the shared lines."""
    return [[j for a, n in zip(item[::2], item[1::2]) for j in range(a, a + n)] for item in data[kind]]


def svgs(data: dict, kind: str) -> list[str]:
    return ["\n".join(data["lines"][j] for j in idx) for idx in line_indices(data, kind)]


def check_offline(page: str) -> None:
    """No URL but the SVG namespace declarations (which browsers never fetch)."""
    for m in re.finditer(r"(?i)https?://", page):
        before = page[max(0, m.start() - 24) : m.start()]
        assert re.search(r'xmlns(?::\w+)?=\\?"$', before), page[m.start() - 60 : m.start() + 60]
        assert page.startswith("http://www.w3.org/", m.start()), page[m.start() : m.start() + 60]
    for tag, k, v in parse(page).attrs:
        assert k != "src", (tag, k, v)
        if k in ("href", "xlink:href"):
            assert v.startswith("#"), (tag, k, v)
    assert "<link" not in page and "@import" not in page and "<iframe" not in page
    assert not re.search(r"url\((?!#)", page)
    assert not re.search(r"\b(fetch|XMLHttpRequest|import\s*\()", parse(page).scripts["script1"])


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scenario_traces():
    return {name: run_scenario(name, "sim").trace for name in SCENARIOS}


@pytest.fixture(scope="module")
def pages(scenario_traces):
    return {name: to_html(trace) for name, trace in scenario_traces.items()}


def lambda_trace() -> Trace:
    """A trace with names and reasons that need escaping."""
    out = OutputView(0, [2, 3], "float32", 24, 0x7F00_0000_0000, "live")
    node = NodeView(0, "<lambda>", "graph", None, [], 1, 0, [out], signature="(float32[2, 3])")
    snap = Snapshot([node], 0, [0], "recording", 1)
    steps = [
        Step(0, "record", 'recorded <lambda> because x < y && "quotes" \'too\'', 1, "<lambda>", 0, snapshot=snap),
        Step(1, "generation", "mark_step(): a < b & c > d", 2, invalidated=[[0, 0]],
             snapshot=Snapshot([replace(node, outputs=[replace(out, state="invalid")])], None, [], "none", 2)),
    ]
    return Trace(steps=steps, meta={"backend": "sim", "device": "cpu <&> test", "torch": "2.x",
                                    "note": "</script><script>alert(1)</script>"})


# -- the content ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_step_headline_and_reason_is_in_the_page(scenario_traces, pages, name):
    data = page_data(pages[name])
    steps = scenario_traces[name].steps
    assert [r[:3] for r in data["rows"]] == [[s.kind, s.headline(), s.reason] for s in steps]
    assert data["n"] == len(data["steps"]) == len(steps)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_node_of_the_final_snapshot_is_in_the_tree_svgs(scenario_traces, pages, name):
    trees = "\n".join(svgs(page_data(pages[name]), "trees"))
    final = scenario_traces[name].last_snapshot()
    assert final is not None and final.nodes
    for node in final.nodes:
        assert f'id="node-{node.id}"' in trees, node.id


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_page_parses_works_offline_and_names_the_meta(scenario_traces, pages, name):
    page = pages[name]
    assert page.startswith("<!DOCTYPE html>")
    check_offline(page)
    meta = scenario_traces[name].meta
    data = page_data(page)
    shown = dict(data["header"]["meta"])
    for key in ("backend", "device", "torch"):
        assert shown[key] == str(meta[key]), key
    for i, (tree, pool, snap, node, banner) in enumerate(data["steps"]):
        assert 0 <= tree < len(data["trees"]) and 0 <= pool < len(data["pools"]) and 0 <= snap < len(data["snaps"])
    assert len(data["tx"]) == len(data["steps"]) and data["tx"] == sorted(data["tx"])
    assert all(0 < x < 1 for x in data["tx"])
    for svg in svgs(data, "trees"):
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")


def test_steps_and_reasons_are_escaped_everywhere():
    trace = lambda_trace()
    page = to_html(trace)
    assert "<lambda>" not in page and "<&>" not in page
    data = page_data(page)
    assert [r[2] for r in data["rows"]] == [s.reason for s in trace.steps]
    assert ["device", "cpu <&> test"] in data["header"]["meta"]
    assert page.count("</script>") == 2  # the data block and the code; the meta's one is escaped
    assert "alert(1)" not in parse(page).scripts["script1"]
    assert '<tspan' in svgs(data, "trees")[0] or "<text" in svgs(data, "trees")[0]
    assert "&lt;lambda&gt;" in svgs(data, "trees")[0]
    assert data["banners"][0]["items"] == ["output 0 of <lambda> (node 0) · float32[2, 3] · 24 B"]
    check_offline(page)


def test_the_generation_banner_lists_the_invalidated_outputs_with_their_functions(scenario_traces, pages):
    trace, data = scenario_traces["generations"], page_data(pages["generations"])
    generation_steps = [i for i, s in enumerate(trace.steps) if s.kind == "generation"]
    assert generation_steps
    for i, step in enumerate(trace.steps):
        banner = data["steps"][i][4]
        if step.kind != "generation":
            assert banner == -1
            continue
        text = data["banners"][banner]
        assert f"Generation {step.generation} begins" in text["head"]
        assert len(text["items"]) == len(step.invalidated)
        for (node, out), item in zip(step.invalidated, text["items"]):
            fn = step.snapshot.node(node).function
            assert item.startswith(f"output {out} of {fn} (node {node})"), item
    assert any(data["banners"][data["steps"][i][4]]["items"] for i in generation_steps)


def test_node_tables_hold_every_output_of_every_node(scenario_traces, pages):
    trace, data = scenario_traces["fwd_bwd"], page_data(pages["fwd_bwd"])
    for i, step in enumerate(trace.steps):
        rec = data["snaps"][data["steps"][i][2]]
        ids = [data["nodes"][j][0] for a, n in zip(rec["n"][::2], rec["n"][1::2]) for j in range(a, a + n)]
        assert ids == [n.id for n in step.snapshot.nodes]
        assert rec["path"] == step.snapshot.path and rec["cur"] == step.snapshot.current_node
    last = trace.steps[-1].snapshot
    rec = data["snaps"][data["steps"][-1][2]]
    by_id = {data["nodes"][j][0]: data["nodes"][j] for a, n in zip(rec["n"][::2], rec["n"][1::2]) for j in range(a, a + n)}
    for node in last.nodes:
        outs = by_id[node.id][8]
        assert [o[0] for o in outs] == [o.index for o in node.outputs]
        assert [o[1] for o in outs] == [o.state for o in node.outputs]


def pool_records(data: dict, i: int) -> list[dict]:
    """The blocks the page lays out for step i, read back from the payload as pool_blocks words them."""
    title, sub, rows, legend, widened = data["pools"][data["steps"][i][1]]
    out = []
    for row, s in enumerate(rows):
        flat = data["segs"][s][1]
        for k in range(0, len(flat), 6):
            category, color, _text = data["pstyles"][flat[k + 2]]
            out.append({"segment": row, "x": flat[k] / 1e4, "width": flat[k + 1] / 1e4, "category": category,
                        "color": color, "node": None if flat[k + 3] < 0 else flat[k + 3],
                        "tip": data["ptexts"][flat[k + 4]]})
    return out


def test_the_pool_laid_out_by_the_page_is_the_pool_view(scenario_traces, pages):
    from cgviz.views.pool import pool_blocks, pool_title

    trace = scenario_traces["branching"]
    data = page_data(pages["branching"])
    checked = 0
    for i, step in enumerate(trace.steps):
        if step.snapshot is None:
            continue
        want, got = pool_blocks(step.snapshot), pool_records(data, i)
        assert data["pools"][data["steps"][i][1]][0] == pool_title(step.snapshot)
        assert len(got) == len(want)
        for w, g in zip(want, got):
            assert g["segment"] == w["segment"] and g["category"] == w["category"] and g["color"] == w["color"]
            assert abs(g["x"] - w["x"]) < 1e-4 and abs(g["width"] - w["width"]) < 1e-4
            assert g["node"] == w["node"] and f"{w['address']:#x}" in g["tip"] and w["label"] in g["tip"]
        checked += 1
    assert checked == sum(s.snapshot is not None for s in trace.steps) > 5
    owned = [b for s in trace.last_snapshot().segments for b in s.blocks if b.allocated and b.node is not None]
    assert owned and all(any(g["node"] == b.node for g in pool_records(data, len(trace.steps) - 1)) for b in owned)


# -- storing pictures once -----------------------------------------------------------------------
def test_identical_pictures_are_stored_once():
    base = run_scenario("chain", "sim").trace
    snaps = [s.snapshot for s in base.steps[4:7]]  # three distinct snapshots
    steps = []
    for i in range(600):
        k = i % 3
        steps.append(Step(i, "path_end", f"reason {i}", 1, snapshot=snaps[k]))
    trace = Trace(steps=steps, meta=dict(base.meta))
    page = to_html(trace)
    data = page_data(page)
    assert len(data["steps"]) == 600
    assert len(data["trees"]) <= 3 and len(data["pools"]) <= 3 and len(data["snaps"]) <= 3
    small = to_html(Trace(steps=steps[:6], meta=dict(base.meta)))
    assert len(page) < len(small) + 600 * 400  # each extra step costs its list row and a few numbers


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_no_more_trees_are_stored_than_there_are_snapshots(scenario_traces, pages, name):
    data = page_data(pages[name])
    distinct = len({id(s.snapshot) for s in scenario_traces[name].steps if s.snapshot is not None})
    assert len(data["trees"]) <= distinct
    assert len(data["pools"]) <= distinct
    assert len(data["lines"]) == len(set(data["lines"]))


def test_a_loaded_trace_renders_like_the_live_one(scenario_traces, pages, tmp_path):
    path = tmp_path / "t.cgtrace.json"
    scenario_traces["branching"].save(path)
    assert to_html(cgviz.Trace.load(path)) == pages["branching"]


# -- traces without pictures ---------------------------------------------------------------------
def test_an_empty_trace_says_so():
    page = to_html(Trace(meta={"backend": "sim"}))
    check_offline(page)
    data = page_data(page)
    assert data["steps"] == [] and data["tx"] == [] and data["n"] == 0
    assert data["empty"].startswith("This trace has no steps")
    assert "<title>cgviz · sim</title>" in page and data["title"] == "cgviz · sim"


def test_an_events_trace_lists_its_steps_and_says_why_there_are_no_pictures():
    trace = run_scenario("generations", "sim", trace="events").trace
    assert trace.steps and all(s.snapshot is None for s in trace.steps)
    page = to_html(trace)
    check_offline(page)
    data = page_data(page)
    assert data["trees"] == [] and data["pools"] == []
    assert all(st[0] == -1 and st[1] == -1 and st[2] == -1 for st in data["steps"])
    assert "no snapshots of the tree or the pool" in data["empty"] and 'trace="full"' in data["empty"]
    assert data["empty"] in data["notices"]
    assert [r[1:3] for r in data["rows"]] == [[s.headline(), s.reason] for s in trace.steps]
    banners = [data["banners"][st[4]] for st in data["steps"] if st[4] >= 0]
    assert banners and any(b["items"] for b in banners)  # named by node even without a snapshot


def test_a_step_without_a_snapshot_in_a_full_trace_has_no_picture():
    trace = run_scenario("chain", "sim").trace
    steps = list(trace.steps)
    steps[3] = replace(steps[3], snapshot=None)
    data = page_data(to_html(Trace(steps=steps, meta=trace.meta)))
    assert data["steps"][3][:3] == [-1, -1, -1]
    assert data["steps"][4][0] >= 0


# -- writing and options -------------------------------------------------------------------------
def test_writes_the_page_atomically_and_returns_it(scenario_traces, tmp_path):
    path = tmp_path / "chain.html"
    path.write_text("old")
    page = to_html(scenario_traces["chain"], path, title="my <run>")
    assert path.read_text(encoding="utf-8") == page
    assert "<title>my &lt;run&gt;</title>" in page
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.html"]  # no temporary file left
    with pytest.raises(FileNotFoundError, match="does not exist"):
        to_html(scenario_traces["chain"], tmp_path / "missing" / "x.html")
    assert cgviz.to_html is to_html and "to_html" in cgviz.__all__


def test_renderers(scenario_traces):
    trace = scenario_traces["branching"]
    ids = [f'id="node-{n.id}"' for n in trace.last_snapshot().nodes]
    builtin = "\n".join(svgs(page_data(to_html(trace, renderer="builtin")), "trees"))
    assert all(i in builtin for i in ids)
    if dot_available():
        graphviz = "\n".join(svgs(page_data(to_html(trace, renderer="graphviz")), "trees"))
        assert all(i in graphviz for i in ids)
    with pytest.raises(ValueError, match="unknown renderer"):
        to_html(trace, renderer="svg")


@pytest.mark.parametrize("name", gpu_trace_names())
def test_gpu_traces_render(name):
    trace = gpu_trace(name)
    page = to_html(trace)
    check_offline(page)
    data = page_data(page)
    assert ["device", trace.meta["device"]] in data["header"]["meta"] and ["backend", "cuda"] in data["header"]["meta"]
    assert len(data["steps"]) == len(trace.steps)


# -- the command line ----------------------------------------------------------------------------
def test_cli_render_writes_the_page(scenario_traces, tmp_path, capsys):
    src = tmp_path / "run.cgtrace.json"
    scenario_traces["chain"].save(src)
    assert main(["render", str(src), "-o", str(tmp_path / "out.html")]) == 0
    out = capsys.readouterr().out
    assert f"→ {tmp_path / 'out.html'}" in out
    page = (tmp_path / "out.html").read_text(encoding="utf-8")
    assert "record g → node 4" in page
    assert main(["render", str(src)]) == 0  # default: beside the trace, .html for .cgtrace.json
    assert (tmp_path / "run.html").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "trace file not found"),
        ("{", "truncated or not JSON"),
        ('{"format": "cgviz-trace", "schema_version": 99, "meta": {}, "steps": []}', "newer cgviz"),
        ('{"format": "other"}', "not a cgviz trace"),
    ],
)
def test_cli_render_errors_are_one_line(tmp_path, capsys, content, message):
    src = tmp_path / "bad.cgtrace.json"
    if content is not None:
        src.write_text(content)
    assert main(["render", str(src), "-o", str(tmp_path / "x.html")]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("cgviz render: ") and message in err and "\n" not in err, err
    assert "Traceback" not in captured.err
    assert not (tmp_path / "x.html").exists()


def test_cli_render_into_a_missing_directory_exits_1(scenario_traces, tmp_path, capsys):
    src = tmp_path / "run.cgtrace.json"
    scenario_traces["chain"].save(src)
    assert main(["render", str(src), "-o", str(tmp_path / "nope" / "x.html")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_cli_demo_writes_the_page(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--backend", "sim", "--scenario", "chain"]) == 0
    out = capsys.readouterr().out
    assert "explorer written to cgviz-demo.html" in out
    assert "why:" not in out  # the steps are printed with --text only
    page = (tmp_path / "cgviz-demo.html").read_text(encoding="utf-8")
    assert "cgviz · chain · sim" in page and "record g → node 4" in page
    assert main(["demo", "--backend", "sim", "--scenario", "chain", "-o", "a.html", "-o", "t.cgtrace.json"]) == 0
    out = capsys.readouterr().out
    assert "explorer written to a.html" in out and "trace saved to t.cgtrace.json" in out
    assert cgviz.Trace.load(tmp_path / "t.cgtrace.json").meta["scenario"] == "chain"
    assert (tmp_path / "a.html").read_text(encoding="utf-8").count("record g → node 4") >= 1


# -- in a browser --------------------------------------------------------------------------------
def chromium_dom(path: Path, fragment: str = "") -> str:
    with tempfile.TemporaryDirectory() as profile:
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", "--disable-sync", f"--user-data-dir={profile}",
               "--window-size=1400,1000", "--virtual-time-budget=30000", "--dump-dom", f"file://{path}{fragment}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert done.stdout, done.stderr[-2000:]
    return done.stdout


# steps through the whole trace with ▶ and checks that the tree shown (patched in place where only
# some node or edge groups changed) has the same groups as the stored SVG of that step, and that
# the pool shown (its rows reused from step to step) has the stored pool's title and blocks
STEP_CHECK = r"""<script>
window.addEventListener("load", function () { window.cgvizReady.then(run); });
function run() {
  var D = JSON.parse(document.getElementById("cgviz-data").textContent), box = document.querySelector(".cg-tree-box");
  var ref = document.createElement("div"), bad = [], badPools = [], seen = [];
  function svgOf(t, kind) { var r = D[kind || "trees"][t], o = []; for (var i = 0; i < r.length; i += 2) for (var j = r[i]; j < r[i] + r[i + 1]; j++) o.push(D.lines[j]); return o.join("\n"); }
  function poolOf(t) {  // what the pool panel must show for pool t: its title and each block's node and tooltip
    var r = D.pools[t], o = [r[0]];
    r[2].forEach(function (s) { var b = D.segs[s][1]; for (var k = 0; k < b.length; k += 6) o.push((b[k + 3] < 0 ? "" : b[k + 3]) + "|" + D.ptexts[b[k + 4]]); });
    return o.join("\n");
  }
  function poolShown() {
    var box = q("pool-box"), o = [box.querySelector(".cg-pool-title").textContent];
    box.querySelectorAll(".cg-blk").forEach(function (b) { o.push((b.dataset.node || "") + "|" + b.title); });
    return o.join("\n");
  }
  function groups(root) { var m = {}; root.querySelectorAll('[id^="node-"],[id^="edge-"]').forEach(function (g) { var c = g.cloneNode(true); c.classList.remove("cg-sel"); if (!c.getAttribute("class")) c.removeAttribute("class"); m[g.id] = c.outerHTML; }); return m; }
  var q = function (c) { return document.querySelector(".cg-" + c); };
  q("first").click();
  for (var k = 0; k < D.steps.length; k++) {
    if (k) q("next").click();
    var i = +q("slider").value; seen.push(i);
    ref.innerHTML = svgOf(D.steps[i][0]);
    var a = groups(box), b = groups(ref);
    if (JSON.stringify(Object.keys(a).sort()) !== JSON.stringify(Object.keys(b).sort()) || Object.keys(b).some(function (x) { return a[x] !== b[x]; })) bad.push(i);
    // the pool shown (rows reused from step to step) is the stored one
    if (poolShown() !== poolOf(D.steps[i][1])) badPools.push(i);
  }
  document.body.setAttribute("data-check", JSON.stringify({seen: seen, bad: bad, badPools: badPools, headline: q("headline").textContent}));
}
</script>
</body>"""


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium to run the page's script")
def test_the_script_opens_the_step_and_node_in_the_address(scenario_traces, tmp_path):
    trace = scenario_traces["branching"]
    path = tmp_path / "b.html"
    to_html(trace, path)
    dom = chromium_dom(path, "#step=16&node=2")
    assert f"step 16/{len(trace.steps)}" in dom
    assert re.search(r'<li class="k-record cur"[^>]*data-i="15"|<li data-i="15" class="k-record cur"', dom)
    assert "A · node 2" in dom and "selected · click it again" in dom  # the pinned node's output table
    assert 'id="node-5"' in dom  # the tree of that step is in the page
    assert re.search(r'class="cg-marker" style="[^"]*left: [0-9.]+%', dom)


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium to run the page's script")
@pytest.mark.parametrize("name", ["fwd_bwd", "generations"])
def test_stepping_shows_each_steps_tree(scenario_traces, tmp_path, name):
    trace = scenario_traces[name]
    path = tmp_path / f"{name}.html"
    path.write_text(to_html(trace).replace("</body>", STEP_CHECK), encoding="utf-8")
    dom = chromium_dom(path)
    check = json.loads(html.unescape(re.search(r'data-check="([^"]*)"', dom).group(1)))
    assert check["seen"] == list(range(len(trace.steps)))
    assert check["bad"] == [] and check["badPools"] == []
    assert check["headline"].startswith(f"step {len(trace.steps)}/{len(trace.steps)} · ")


# -- the benchmark ---------------------------------------------------------------------------------
def test_render_benchmark_smoke(tmp_path):
    out = tmp_path / "render.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "render.py"), "--nodes", "8", "--steps", "40", "--samples", "3",
         "--graphviz-samples", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert json.loads(out.read_text()) == result
    assert result["benchmark"] == "render" and result["trace"]["steps"] == 40
    assert result["goals"] == {"step_change_ms": 100.0, "load_s": 2.0}
    assert result["load"]["full"]["measured"] is True
    assert all(isinstance(result["step_change"][k], float) and result["step_change"][k] >= 0
               for k in ("tree_builtin_ms", "pool_ms"))  # times are measured, not asserted
    assert result["to_html"]["bytes"] > 0 and result["to_html"]["trees_stored"] <= result["to_html"]["trees_drawn"]
    assert "tree_builtin" in result["vs_goal"]


# -- progress ------------------------------------------------------------------------------------
def test_to_html_reports_progress_per_step_then_per_tree(scenario_traces, pages):
    trace = scenario_traces["branching"]
    heard = []
    page = to_html(trace, renderer="builtin", progress=lambda done, total, what: heard.append((done, total, what)))
    n = len(trace.steps)
    steps = [h for h in heard if h[2] == "steps"]
    trees = [h for h in heard if h[2] == "trees"]
    assert [h[0] for h in steps] == list(range(1, n + 1)) and {h[1] for h in steps} == {n}
    assert trees and trees[-1][0] == trees[-1][1] and heard.index(trees[0]) > heard.index(steps[-1])
    assert page == to_html(trace, renderer="builtin")  # the page does not depend on being watched


def test_cli_render_shows_progress_only_for_slow_work(scenario_traces, tmp_path, capsys, monkeypatch):
    import cgviz.cli as cli

    src = tmp_path / "run.cgtrace.json"
    scenario_traces["chain"].save(src)
    assert main(["render", str(src), "-o", str(tmp_path / "quick.html")]) == 0
    assert capsys.readouterr().err == ""  # done within a second: nothing shown
    monkeypatch.setattr(cli.ProgressBar, "__init__", _no_delay(cli.ProgressBar.__init__))
    assert main(["render", str(src), "-o", str(tmp_path / "slow.html"), "--renderer", "builtin"]) == 0
    err = capsys.readouterr().err
    n = len(scenario_traces["chain"].steps)
    assert f"building page: {n}/{n} steps (100%)" in err and "drawing trees:" in err


def _no_delay(init):
    def wrapped(self, *a, **k):
        init(self, *a, **{**k, "delay": 0.0, "log_every": 0.0})
    return wrapped
