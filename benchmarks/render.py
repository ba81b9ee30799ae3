"""Rendering a large trace: loading it, exporting it as HTML, and the cost of one step change.

The trace is synthetic, built from the model dataclasses: a tree of 1,000 graph nodes
(25 input-shape variants, each a 20-graph chain that branches into two 10-graph heads,
"train" and "eval") and 10,000 stored steps. First every variant is recorded (a generation,
the chain and the train head recorded; a generation, the chain replayed and the eval head
recorded), then replay iterations cycle through the variants and heads: a generation, the
30 replays of one path, and a path end after an eval path (a train path's outputs are still
live at the next generation, which invalidates them). Every step has a snapshot: every node with its output
(live on the current path, dead elsewhere, invalid once a generation passed it by) and the
pool, one 2 MiB+ segment per variant with a block per node output. Unchanged nodes and
segments are shared between snapshots, and in the replay phase the snapshot at each
position of a path is made once and shared by the later iterations of that path (in a real
run only the replay counts would differ), so memory stays sane.

Measured (medians over a sample of step changes to distinct steps, cold caches):

- load: the whole trace saved (`Trace.save`) and loaded (`Trace.load`): file size, save and
  load times. On disk each distinct snapshot, node, output, segment and block is stored once
  and a snapshot as a delta against the previous one (docs/trace-format.md), so the file grows
  with what changes, not as steps × nodes. The same trace at the "events" level (no
  snapshots) beside it. A file over --max-json-mb is not loaded (marked so); none should be.
- to_html: the whole trace as one page (trees by the built-in layout: one drawing per tree
  structure, the steps' node looks applied by the page), its time and size, how many trees
  (structures), node looks and pools were drawn and stored, and the time spent drawing them.
  When Chromium is installed, the page is opened headless and timed: opening it, ▶ (the next
  step) and jumps with the slider, each to the end of the layout it causes.
- step change: `tree_svg` (built-in layout; Graphviz on a few steps when `dot` is installed),
  `pool_svg` (with the step's node highlighted, each drawn from scratch: the pictures the
  pool view keeps are forgotten before each; `pool_png` the same way, for comparison), the
  timeline (drawn once; a step change moves its marker), and, when the Explorer widget is
  importable, what its kernel side costs: opening (the head and the first window of
  pictures) and answering a far jump (the pictures of the window around that step).

Goals stated by the project: one step change ≤ 100 ms, load ≤ 2 s. Every figure comes with
its ratio to the goal (≤ 1 meets it).

usage: python benchmarks/render.py [--quick] [--nodes N] [--steps S] [--samples K]
                                   [--graphviz-samples G] [--max-json-mb M] [--no-browser] [--only load]
                                   [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

if __package__ in (None, ""):  # run as a script from a checkout: import this checkout's cgviz
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cgviz
from cgviz.trace.model import Block, NodeView, OutputView, Segment, Snapshot, Step, Trace
from cgviz.views.html import page_payload

GOAL_STEP_MS = 100.0
GOAL_LOAD_S = 2.0
VARIANTS = 25
POOL_BASE = 0x7F3A_0000_0000
OUT_BYTES = 64 * 256 * 4  # each output: float32[64, 256], 64 KiB


# -- the synthetic trace -------------------------------------------------------------------------
class _Builder:
    def __init__(self, nodes: int, variants: int) -> None:
        self.variants = variants
        self.per = max(4, nodes // variants)
        self.chain = self.per // 2
        self.head = (self.per - self.chain) // 2
        self.nodes: dict[int, NodeView] = {}  # latest NodeView of every recorded node
        self.order: list[int] = []
        self.segments: dict[int, Segment] = {}
        self.steps: list[Step] = []
        self.generation = 1
        self.ids: dict[tuple[int, str, int], int] = {}  # (variant, part, position) -> node id
        self.path: list[int] = []
        self.distinct_snapshots = 0

    # a path: the chain then one head, as (part, position, function, parent key)
    def path_keys(self, head: str) -> list[tuple[str, int]]:
        return [("chain", k) for k in range(self.chain)] + [(head, k) for k in range(self.head)]

    def function(self, part: str, k: int) -> str:
        return f"layer{k}" if part == "chain" else f"{part}_head{k}"

    def _set(self, node: NodeView) -> None:
        self.nodes[node.id] = node

    def _state(self, node_id: int, state: str, replays: Optional[int] = None) -> None:
        n = self.nodes[node_id]
        out = n.outputs[0]
        if out.state != state or (replays is not None and replays != n.replays):
            self._set(replace(n, replays=n.replays if replays is None else replays,
                              outputs=[replace(out, state=state)]))

    def snapshot(self, current: Optional[int], state: str) -> Snapshot:
        self.distinct_snapshots += 1
        return Snapshot(
            nodes=[self.nodes[i] for i in self.order],
            current_node=current,
            path=list(self.path),
            state=state,  # type: ignore[arg-type]
            generation=self.generation,
            segments=[self.segments[v] for v in sorted(self.segments)],
        )

    def add_step(self, kind: str, reason: str, snapshot: Snapshot, **kw: Any) -> None:
        self.steps.append(Step(index=len(self.steps), kind=kind, reason=reason,  # type: ignore[arg-type]
                               generation=self.generation, snapshot=snapshot, duration=2e-5, **kw))

    def new_generation(self) -> None:
        invalid = [i for i in self.path if self.nodes[i].outputs[0].state == "live"]
        for i in invalid:
            self._state(i, "invalid")
        old = self.generation
        self.generation += 1
        self.path = []
        what = ", ".join(f"output 0 of node {i}" for i in invalid) or "nothing live"
        self.add_step("generation", f"mark_step(): generation {old} ends, generation {self.generation} begins; "
                      f"{what} invalidated", self.snapshot(None, "none"),
                      invalidated=[[i, 0] for i in invalid])

    def record(self, variant: int, part: str, k: int) -> None:
        nid = len(self.order)
        parent = self.path[-1] if self.path else None
        if part != "chain" and k == 0:
            parent = self.ids[(variant, "chain", self.chain - 1)]
        seg = self.segments.get(variant)
        index_in_seg = len(seg.blocks) if seg else 0
        address = POOL_BASE + variant * (1 << 24) + index_in_seg * OUT_BYTES
        shape = [64, 256]
        node = NodeView(nid, self.function(part, k), "graph", parent, [], self.generation, 0,
                        [OutputView(0, shape, "float32", OUT_BYTES, address, "live")],
                        signature=f"float32[{8 * (variant + 1)}, 256]")
        self.ids[(variant, part, k)] = nid
        self.order.append(nid)
        self._set(node)
        if parent is not None:
            p = self.nodes[parent]
            self._set(replace(p, children=p.children + [nid]))
        block = Block(address, OUT_BYTES, True, OUT_BYTES, f"node {nid} output 0", nid, 0)
        blocks = (seg.blocks if seg else []) + [block]
        size = max(2 << 20, (len(blocks) * OUT_BYTES + (2 << 20) - 1) // (2 << 20) * (2 << 20))
        self.segments[variant] = Segment(POOL_BASE + variant * (1 << 24), size, "large", blocks)
        self.path.append(nid)
        why = ("no root graph yet for this signature; recording a new root" if parent is None else
               f"no child for {node.function} under node {parent} (output 0 of node {parent} live); "
               f"recording a new child of node {parent}")
        self.add_step("record", why, self.snapshot(nid, "recording"), function=node.function, node=nid, parent=parent)

    def execute(self, variant: int, part: str, k: int, snapshot: Optional[Snapshot] = None) -> None:
        nid = self.ids[(variant, part, k)]
        parent = self.path[-1] if self.path else None
        self.path.append(nid)
        n = self.nodes[nid]
        self._state(nid, "live", n.replays + 1)
        where = "a root" if parent is None else f"under node {parent}"
        why = f"{n.function} replays node {nid} ({where}): static inputs in place and the path's live outputs as at recording"
        self.add_step("execute", why, snapshot or self.snapshot(nid, "execution"),
                      function=n.function, node=nid, parent=parent)

    def path_end(self, snapshot: Optional[Snapshot] = None) -> None:
        for i in self.path:
            self._state(i, "dead")
        ended = "→".join(map(str, self.path))
        self.path = []
        self.add_step("path_end", f"all outputs of path {ended} are dead; the next call starts from the roots",
                      snapshot or self.snapshot(None, "none"))


def synthetic_trace(nodes: int = 1000, steps: int = 10_000, variants: int = VARIANTS) -> tuple[Trace, dict]:
    b = _Builder(nodes, variants)
    # recording: each variant's chain + train head, then its eval head under the replayed chain
    for v in range(variants):
        b.new_generation()
        for part, k in b.path_keys("train"):
            b.record(v, part, k)
        b.new_generation()
        for part, k in b.path_keys("eval"):
            (b.execute if part == "chain" else b.record)(v, part, k)
        b.path_end()
    # replaying: iterations over variants and heads; each path position's snapshot made once
    shared: dict[tuple, Snapshot] = {}
    it = 0
    while len(b.steps) < steps:
        v, head = it % variants, ("train", "eval")[(it // variants) % 2]
        b.new_generation()
        for pos, (part, k) in enumerate(b.path_keys(head)):
            if len(b.steps) >= steps:
                break
            key = (v, head, pos)
            b.execute(v, part, k, shared.get(key))
            shared.setdefault(key, b.steps[-1].snapshot)  # type: ignore[arg-type]
        if len(b.steps) < steps and head == "eval":  # a train path stays live: the next generation invalidates it
            key = (v, head, "end")
            if key not in shared:
                b.path_end()
                shared[key] = b.steps[-1].snapshot  # type: ignore[assignment]
            else:
                b.path_end(shared[key])
        it += 1
    del b.steps[steps:]
    trace = Trace(steps=b.steps, meta={"backend": "synthetic", "device": "none (built from the model dataclasses)",
                                       "torch": "n/a", "trace_level": "full", "scenario": "render benchmark"})
    info = {
        "nodes": len(b.order),
        "steps": len(trace.steps),
        "calls": trace.calls,
        "variants": variants,
        "path_length": b.chain + b.head,
        "distinct_snapshot_objects": len({id(s.snapshot) for s in trace.steps if s.snapshot is not None}),
        "kinds": {k: v for k, v in trace.counts().items() if v},
    }
    return trace, info


# -- measuring -----------------------------------------------------------------------------------
def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    value = fn()
    return time.perf_counter() - t, value


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 3)


def _ratio(value: float, goal: float) -> float:
    return round(value / goal, 3)


def measure_load(trace: Trace, max_json_mb: float) -> dict:
    """The trace saved and loaded whole, at the "events" level (steps only) and in full."""
    events = Trace(steps=[replace(s, snapshot=None) for s in trace.steps], meta=dict(trace.meta, trace_level="events"))
    with tempfile.TemporaryDirectory() as tmp:
        return {"events_level": _save_and_load(events, os.path.join(tmp, "events.cgtrace.json"), max_json_mb),
                "full": _save_and_load(trace, os.path.join(tmp, "full.cgtrace.json"), max_json_mb)}


def _save_and_load(trace: Trace, path: str, max_json_mb: float) -> dict:
    """Save `trace` to `path` and load it back, each timed; a file over the limit is not loaded."""
    save_s, _ = _timed(lambda: trace.save(path))
    size = os.path.getsize(path)
    out: dict[str, Any] = {"steps": len(trace.steps), "json_bytes": size, "json_mib": round(size / 2**20, 2),
                           "save_s": round(save_s, 3)}
    if size > max_json_mb * 2**20:
        return {**out, "measured": False, "vs_goal": None,
                "why": f"the file is {size / 2**20:.0f} MiB (> --max-json-mb {max_json_mb:g}): not loaded"}
    load_s, _ = _timed(lambda: Trace.load(path))
    return {**out, "measured": True, "load_s": round(load_s, 3), "vs_goal": _ratio(load_s, GOAL_LOAD_S)}


# Runs in the exported page before its own scripts: notes when the page's promises resolve.
# `cgvizShown`: its explorer is mounted on the first part of the payload, the first steps' pictures
# (`shown_ms`); `open_ms` is the next animation frame after that, the frame that paints it (the
# page decodes the rest only after that frame). `cgvizReady`: every step's pictures are in
# (`ready_ms`). A page of one part (a short trace's) is shown when it is ready.
_BROWSER_MOUNTED = """(() => {
  const noted = (name, at, then) => {
    let p;
    Object.defineProperty(window, name, {configurable: true, get: () => p, set(v) {
      p = v; v.then(() => { window[at] = performance.now(); if (then) then(); });
    }});
  };
  noted("cgvizShown", "cgvizShownAt", () => requestAnimationFrame(() => { window.cgvizPaintedAt = performance.now(); }));
  noted("cgvizReady", "cgvizReadyAt");
})();"""

# Runs in the exported page once every step's pictures are in: ▶ 30 times from a step three
# quarters in, then 30 jumps with the slider; each timed to the end of the layout it causes (a
# forced layout, before painting).
_BROWSER_PROBE = """async () => {
  await window.cgvizReady;
  const root = document.querySelector(".cgviz");
  const q = (name) => root.querySelector(".cg-" + name), S = q("slider"), n = +S.max + 1;
  const force = () => document.documentElement.offsetHeight + q("tree-box").scrollWidth;
  const med = (v) => { v.sort((a, b) => a - b); return v[Math.floor(v.length / 2)]; };
  const next = [], jump = [];
  S.value = Math.floor(n * 3 / 4); S.dispatchEvent(new Event("input"));
  force();
  for (let k = 0; k < 30; k++) { const a = performance.now(); q("next").click(); force(); next.push(performance.now() - a); }
  for (let k = 0; k < 30; k++) {
    const a = performance.now(); S.value = (k * 7919) % n; S.dispatchEvent(new Event("input")); force(); jump.push(performance.now() - a);
  }
  const shown = window.cgvizShownAt ?? window.cgvizReadyAt;
  return {open_ms: Math.round(window.cgvizPaintedAt ?? shown), shown_ms: Math.round(shown),
          ready_ms: Math.round(window.cgvizReadyAt), next_median_ms: med(next), next_max_ms: Math.max(...next),
          jump_median_ms: med(jump), jump_max_ms: Math.max(...jump)};
}"""


def _chromium() -> Optional[str]:
    import shutil

    return next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def measure_browser(page: str, browser: Any = None) -> dict:
    """The exported page in headless Chromium (driven by Playwright): time to show its first steps,
    to paint them, and to have every step's pictures in; then per step change. `browser`: a
    Playwright browser to use (one running already, as a test's), else Chromium is started and
    stopped here."""
    chromium = _chromium()
    if browser is None and chromium is None:
        return {"skipped": "no Chromium found (chromium, chromium-browser or google-chrome)"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.html"
        path.write_text(page, encoding="utf-8")
        url = path.as_uri()  # opened as a reader opens it: at its first step
        if browser is not None:
            result = _probe(browser, url)
        else:
            try:
                from playwright.sync_api import sync_playwright
            except ImportError:
                return {"skipped": "Playwright is not installed (pip install playwright)"}
            with sync_playwright() as pw:
                started = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
                try:
                    result = _probe(started, url)
                finally:
                    started.close()
    result = {k: round(v, 1) for k, v in result.items()}
    result["browser"] = os.path.basename(chromium or "chromium")
    result["how"] = ("headless, software rendering, opened at its first step; shown: the explorer mounted on the "
                     "first steps' pictures; open: the frame that paints them; ready: every step's pictures in; "
                     "then ▶ from step 3/4 in and slider jumps, each to the end of the layout it causes")
    return result


def _probe(browser: Any, url: str) -> dict:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        tab = context.new_page()
        tab.add_init_script(_BROWSER_MOUNTED)
        tab.goto(url)
        return tab.evaluate(_BROWSER_PROBE)
    finally:
        context.close()


def measure_html(trace: Trace, browser: bool = True) -> dict:
    import cgviz.views.tree.frames as states_mod
    import cgviz.views.pool as pool_mod
    import cgviz.views.tree as tree_mod
    from cgviz.views.html import to_html

    spent = {"tree": [0, 0.0], "pool": [0, 0.0]}

    def counting(name: str, fn: Callable) -> Callable:
        def wrapper(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name][0] += 1
                spent[name][1] += time.perf_counter() - t
        return wrapper

    # trees: drawn per step (Graphviz), or per structure with the built-in layout (tree.frames)
    tree_svg, draw_structure, pool_svg = tree_mod.tree_svg, states_mod.draw_structure, pool_mod.pool_svg
    tree_mod.tree_svg, pool_mod.pool_svg = counting("tree", tree_svg), counting("pool", pool_svg)
    states_mod.draw_structure = counting("tree", draw_structure)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.html")
            seconds, page = _timed(lambda: to_html(trace, path, renderer="builtin"))
            size = os.path.getsize(path)
    finally:
        tree_mod.tree_svg, states_mod.draw_structure, pool_mod.pool_svg = tree_svg, draw_structure, pool_svg
    data = page_payload(page)
    return {
        "seconds": round(seconds, 2),
        "bytes": size,
        "renderer": "builtin",
        "trees_drawn": spent["tree"][0],
        "trees_stored": len(data["trees"]),
        "tree_draw_s": round(spent["tree"][1], 2),
        "tree_looks_stored": len(data.get("tree", {}).get("looks", [])),
        "pools_drawn": spent["pool"][0],
        "pools_stored": len(data["pools"]),
        "pool_draw_s": round(spent["pool"][1], 2),
        "svg_lines_stored": len(data["lines"]),
        "bytes_per_step": round(size / max(1, len(trace.steps))),
        "in_browser": measure_browser(page) if browser else {"skipped": "--no-browser"},
    }


def measure_step_changes(trace: Trace, samples: int, graphviz_samples: int, rng: random.Random) -> dict:
    from cgviz.views.pool import clear_cache, pool_png, pool_svg
    from cgviz.views.timeline import timeline_svg
    from cgviz.views.tree import dot_available, tree_svg

    picked = rng.sample(range(len(trace.steps)), min(samples, len(trace.steps)))
    out: dict[str, Any] = {}
    times = [_timed(lambda s=trace.steps[i]: tree_svg(s.snapshot, s, renderer="builtin"))[0] for i in picked]
    out["tree_builtin_ms"] = _median_ms(times)
    if dot_available() and graphviz_samples > 0:
        few = picked[:graphviz_samples]
        times = [_timed(lambda s=trace.steps[i]: tree_svg(s.snapshot, s, renderer="graphviz"))[0] for i in few]
        out["tree_graphviz_ms"] = _median_ms(times)
        out["tree_graphviz_samples"] = len(few)
    else:
        out["tree_graphviz_ms"] = None
        out["tree_graphviz_skipped"] = "Graphviz `dot` not installed" if graphviz_samples else "--graphviz-samples 0"

    def pool_cold(draw: Callable[[Step], Any]) -> float:
        times = []
        for i in picked:
            clear_cache()
            times.append(_timed(lambda s=trace.steps[i]: draw(s))[0])
        return _median_ms(times)

    out["pool_ms"] = pool_cold(lambda s: pool_svg(s.snapshot, highlight_node=s.node))
    out["pool_png_ms"] = pool_cold(lambda s: pool_png(s.snapshot, highlight_node=s.node))
    draw_s, svg = _timed(lambda: timeline_svg(trace))
    out["timeline_draw_once_ms"] = round(draw_s * 1000, 1)
    out["timeline_bytes"] = len(svg)
    out["timeline_marker"] = "moved in place, not redrawn (a CSS position in the HTML page, an overlay in the Explorer)"
    out["samples"] = len(picked)
    return out


def measure_explorer(trace: Trace, samples: int, rng: random.Random) -> dict:
    try:
        from cgviz.widgets.explorer import Explorer
    except Exception as exc:  # not there yet, or ipywidgets missing
        return {"skipped": f"cgviz.widgets.explorer.Explorer not importable: {type(exc).__name__}: {exc}"}
    from cgviz.views.pool import clear_cache

    clear_cache()
    prepare_s, ex = _timed(lambda: Explorer(trace))  # the first view: the head and a window of pictures
    ex.send = lambda content, buffers=None: None  # no front end here
    picked = rng.sample(range(len(trace.steps)), min(samples, len(trace.steps)))

    def jump(i: int) -> None:  # what the kernel does when the front end asks for a far step
        ex.answer({"type": "steps", "steps": list(range(i - 16, i + 33))})

    times = [_timed(lambda i=i: jump(i))[0] for i in picked]
    again = [_timed(lambda i=i: jump(i))[0] for i in picked[:10]]
    ex.close()
    return {
        "prepare_s": round(prepare_s, 3),
        "jump_ms": _median_ms(times),
        "jump_max_ms": round(max(times) * 1000, 3),
        "jump_again_ms": _median_ms(again),
        "renderer": ex._data.renderer,
        "samples": len(picked),
    }


def environment() -> dict:
    import matplotlib
    import torch

    from cgviz.views.tree import dot_available

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cgviz": cgviz.__version__,
        "matplotlib": matplotlib.__version__,
        "graphviz_dot": dot_available(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small trace (100 nodes, 1,000 steps) for a smoke run")
    ap.add_argument("--nodes", type=int, default=None, help="graph nodes in the tree (default 1000)")
    ap.add_argument("--steps", type=int, default=None, help="stored steps (default 10000)")
    ap.add_argument("--samples", type=int, default=None, help="step changes to time (default 40)")
    ap.add_argument("--graphviz-samples", type=int, default=3, help="step changes timed with Graphviz (slow)")
    ap.add_argument("--max-json-mb", type=float, default=256.0, help="load a saved trace only up to this size")
    ap.add_argument("--no-browser", action="store_true", help="skip timing the page in headless Chromium")
    ap.add_argument("--only", choices=("load",), help="measure only this part")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args(argv)
    nodes = args.nodes or (100 if args.quick else 1000)
    steps = args.steps or (1000 if args.quick else 10_000)
    samples = args.samples or (10 if args.quick else 40)
    rng = random.Random(0)

    build_s, (trace, info) = _timed(lambda: synthetic_trace(nodes, steps, min(VARIANTS, max(1, nodes // 8))))
    info["build_s"] = round(build_s, 2)
    result: dict[str, Any] = {"benchmark": "render", "quick": args.quick, "trace": info,
                              "goals": {"step_change_ms": GOAL_STEP_MS, "load_s": GOAL_LOAD_S}}
    result["load"] = measure_load(trace, args.max_json_mb)
    load_vs = {"load_events_level": result["load"]["events_level"]["vs_goal"],
               "load_full": result["load"]["full"]["vs_goal"]}
    if args.only == "load":
        result["vs_goal"] = load_vs
        return _finish(result, args.out)
    result["step_change"] = measure_step_changes(trace, samples, args.graphviz_samples, rng)
    result["explorer"] = measure_explorer(trace, samples, rng)
    result["to_html"] = measure_html(trace, browser=not args.no_browser)

    sc, ex = result["step_change"], result["explorer"]
    vs: dict[str, Any] = {
        **load_vs,
        "tree_builtin": _ratio(sc["tree_builtin_ms"], GOAL_STEP_MS),
        "pool": _ratio(sc["pool_ms"], GOAL_STEP_MS),
        "pool_png": _ratio(sc["pool_png_ms"], GOAL_STEP_MS),
    }
    if sc.get("tree_graphviz_ms") is not None:
        vs["tree_graphviz"] = _ratio(sc["tree_graphviz_ms"], GOAL_STEP_MS)
    if "jump_ms" in ex:
        vs["explorer_jump"] = _ratio(ex["jump_ms"], GOAL_STEP_MS)
    web = result["to_html"]["in_browser"]
    if "next_median_ms" in web:
        vs["html_step_change_next"] = _ratio(web["next_median_ms"], GOAL_STEP_MS)
        vs["html_step_change_jump"] = _ratio(web["jump_median_ms"], GOAL_STEP_MS)
        vs["html_open"] = _ratio(web["open_ms"] / 1000, GOAL_LOAD_S)
    result["vs_goal"] = vs
    return _finish(result, args.out)


def _finish(result: dict, out: Optional[str]) -> int:
    """Add peak memory and the environment, print the JSON, and write it to `out` if given."""
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    result["environment"] = environment()
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
