// The explorer's logic without a document: decoding the payload, what a step shows, which rows of
// the step list to build, and which steps to ask the kernel for. explorer_panels.js and explorer.js
// draw with it: the page and the widget load the three as one module, this file first (views/html.py,
// explorer_module); Node loads it alone for the unit tests (tests/js), through `module.exports`.

// -- the payload -------------------------------------------------------------------------------------
// Records come as lists, their fields in the order views/payload.py declares; the head names those
// orders once (`fields`), and everything past decoding reads the records by name.

/** {field: its position} of a record's field names. */
function positions(names) {
  const at = {};
  names.forEach((k, j) => { at[k] = j; });
  return at;
}

/** A record (a list) as an object by its field names; fields left out at the end read null. */
function named(names, rec) {
  if (rec == null) return null;
  const out = {};
  for (let j = 0; j < names.length; j++) out[names[j]] = rec[j] === undefined ? null : rec[j];
  return out;
}

/** The head (page_data.PageData.head) with its records named. */
function decodeHead(h) {
  const F = h.fields, rec = (name) => (r) => named(F[name], r), profile = {};
  for (const id in h.profile || {}) profile[id] = {time: h.profile[id].time, kernels: h.profile[id].kernels.map(rec("kernel"))};
  return Object.assign({}, h, {
    header: Object.assign({}, h.header, {meta: h.header.meta.map(rec("meta")), kinds: h.header.kinds.map(rec("kind_count"))}),
    rows: h.rows.map(rec("row")), profile,
  });
}

/** A piece of pictures (PageData.piece or .window) with its records named: the step records of
 * either kind of piece as `at` (step index -> record), the tree states' deltas keyed by step
 * as the keyframes are. Lists of plain values (lines, runs, texts) and the flat records (a
 * pool's blocks, a tree's node states) stay as they came: `layout` reads those. */
function decodePiece(F, p) {
  const rec = (name) => (r) => named(F[name], r), at = {};
  (p.steps || []).forEach((r, i) => { if (r) at[i] = named(F.step, r); });
  for (const i in p.at || {}) at[i] = named(F.step, p.at[i]);
  const out = {
    lines: p.lines || [], trees: p.trees || [], snaps: p.snaps || [], banners: p.banners || [], ptexts: p.ptexts || [],
    nodes: (p.nodes || []).map((r) => { const n = named(F.node, r); n.outputs = n.outputs.map(rec("output")); return n; }),
    segs: (p.segs || []).map(rec("seg")), pstyles: (p.pstyles || []).map(rec("pstyle")),
    legends: (p.legends || []).map((l) => l.map(rec("legend"))), pools: (p.pools || []).map(rec("pool")), at,
  };
  if (p.tree) {
    // a page's deltas come as a list by step (null before the steps of a page's later part)
    const delta = Array.isArray(p.tree.delta) ? p.tree.delta.reduce((o, d, i) => { if (d) o[i] = d; return o; }, {}) : p.tree.delta;
    out.tree = {structs: p.tree.structs.map(rec("struct")), looks: p.tree.looks.map(rec("look")), keys: p.tree.keys, delta};
  }
  return out;
}

/** A flat record's stride and its fields' offsets, e.g. a pool block's `b[k + at.node]`. */
function layout(names) { return {stride: names.length, at: positions(names)}; }

/** The line indices of a stored SVG's runs, [start, count, start, count, ...]. */
function lineIndex(runs) {
  const out = [];
  for (let i = 0; i < runs.length; i += 2) for (let j = runs[i]; j < runs[i] + runs[i + 1]; j++) out.push(j);
  return out;
}

const PIECE_LISTS = ["lines", "trees", "nodes", "snaps", "banners", "segs", "pstyles", "ptexts", "legends", "pools"];

/** What the explorer holds of the payload: the head's facts and every piece merged so far. */
function newModel(fields) {
  const m = {fields, n: 0, rows: [], steps: [], tree: null, tx: [], empty: "", widened: "", repeats: "", graphStep: "",
    profile: {}};
  PIECE_LISTS.forEach((k) => { m[k] = []; });
  return m;
}

/** A decoded head into the model: rows from `h.start` on are new or rewritten. */
function applyHead(m, h) {
  m.n = h.n; m.tx = h.tx; m.empty = h.empty; m.widened = h.widened; m.repeats = h.repeats;
  m.graphStep = h.graph_step; m.profile = h.profile;
  m.rows = m.rows.slice(0, h.start).concat(h.rows);
  while (m.steps.length < m.n) m.steps.push(null);
}

/** A decoded piece into the model: its items append to the lists (indices never change), its
 * step records fill their steps; returns the steps filled. */
function mergePiece(m, p) {
  PIECE_LISTS.forEach((k) => { m[k] = m[k].concat(p[k]); });
  if (p.tree) {
    if (!m.tree) m.tree = {structs: [], looks: [], keys: {}, delta: {}};
    m.tree.structs = m.tree.structs.concat(p.tree.structs); m.tree.looks = m.tree.looks.concat(p.tree.looks);
    Object.assign(m.tree.keys, p.tree.keys); Object.assign(m.tree.delta, p.tree.delta);
  }
  const filled = Object.keys(p.at).map(Number);
  filled.forEach((i) => { m.steps[i] = p.at[i]; });
  return filled;
}

/** Forget the pictures of steps `start` on (new steps, or a fold that rewrote the last ones). */
function growModel(m, start) {
  m.steps.length = Math.min(m.steps.length, start);
  if (!m.tree) return;
  for (const k in m.tree.keys) if (+k >= start) delete m.tree.keys[k];
  for (const k in m.tree.delta) if (+k >= start) delete m.tree.delta[k];
}

// -- what a step shows -------------------------------------------------------------------------------
/** The tree's node states after step i: node id -> {look, replays}, from the whole state kept
 * nearest before i (the page keeps one every so many steps; a widget's piece, one per run of
 * steps) or from the state `memo` last computed when that is nearer, then the deltas up to i.
 * `memo` ({state, at}) is updated, so that stepping on applies one delta. */
function treeStateAt(T, F, i, memo) {
  const L = layout(F.node_state);
  let k = i;
  while (k > 0 && !T.keys[k]) k--;
  if (!memo.state || memo.at > i || memo.at < k) { memo.state = treeStateOf(T.keys[k] || [], F); memo.at = k; }
  for (let s = memo.at + 1; s <= i; s++) {
    const d = T.delta[s] || [];
    for (let j = 0; j < d.length; j += L.stride) {
      const id = d[j + L.at.node], look = d[j + L.at.look];
      if (look < 0) delete memo.state[id]; else memo.state[id] = {look, replays: d[j + L.at.replays]};
    }
  }
  memo.at = i;
  return memo.state;
}

/** A whole state (flat node states) as node id -> {look, replays}. */
function treeStateOf(flat, F) {
  const L = layout(F.node_state), out = {};
  for (let j = 0; j < flat.length; j += L.stride) {
    out[flat[j + L.at.node]] = {look: flat[j + L.at.look], replays: flat[j + L.at.replays]};
  }
  return out;
}

/** What step i (clamped to the trace) shows: its row and record (null until its pictures come),
 * its headline as [before, kind, after] (the kind's word in its colour; after "rank r · " in a
 * merged trace), the tree panel's case ("states", "whole", or "none" with its message; a CUDA
 * graph's step says so), its snapshot, the snapshot's line (a folded step's repeats said) and its
 * banner. */
function stepAt(m, i) {
  i = Math.max(0, Math.min(m.n - 1, i | 0));
  const row = m.rows[i], rec = m.steps[i] || null, text = row.headline + row.note;
  const at = Math.max(text.indexOf(row.kind), 0), end = at + row.kind.length;
  const out = {
    i, row, rec, headline: ["step " + (i + 1) + "/" + m.n + " · " + text.slice(0, at), text.slice(at, end), text.slice(end)],
    tree: null, snap: null, snapInfo: "", banner: null,
  };
  if (!rec) return out;
  if (rec.tree >= 0) out.tree = {kind: m.tree ? "states" : "whole"};
  else if (row.graph != null && !m.empty) out.tree = {kind: "none", id: -3, msg: m.graphStep};
  else out.tree = {kind: "none", id: -1, msg: m.empty || "No snapshot was recorded for this step."};
  if (rec.snap >= 0) {
    out.snap = m.snaps[rec.snap];
    out.snapInfo = out.snap.info + (row.times > 1 ? m.repeats.replace("{n}", row.times) : "");
  }
  if (rec.banner >= 0) out.banner = m.banners[rec.banner];
  return out;
}

/** A snapshot's nodes by id (its runs over the node records). */
function nodesOfSnap(m, snap) {
  const out = {};
  lineIndex(snap.n).forEach((j) => { out[m.nodes[j].id] = m.nodes[j]; });
  return out;
}

/** The node the node panel shows: the one selected, else the step's, else the current one; with
 * the words saying which ({id: null, how} where there is none to show). */
function nodeShown(nodes, snap, sel, stepNode) {
  if (sel != null && nodes[sel]) return {id: sel, how: "selected · click it again to follow the steps"};
  let how = sel != null ? "node " + sel + " does not exist at this step; showing " : "";
  const id = stepNode != null && nodes[stepNode] ? stepNode : snap.cur;
  if (id == null || !nodes[id]) {
    return {id: null, how: Object.keys(nodes).length ? "Click a node in the tree to see its outputs." : "No nodes yet."};
  }
  how += (id === stepNode ? "the node of this step" : "the current node") + " · click a node to pin it";
  return {id, how};
}

function replays(n) { return n + (n === 1 ? " replay" : " replays"); }

/** A node's facts line, as the node panel lists them. */
function nodeFacts(n, snap) {
  const facts = [n.kind === "graph" ? "recorded graph" : "warmup run", "generation " + n.generation, replays(n.replays),
    n.parent == null ? "a root" : "parent " + n.parent, n.children.length ? "children " + n.children.join(", ") : "no children"];
  if (snap.cur === n.id) facts.push("current node"); else if (snap.path.indexOf(n.id) >= 0) facts.push("on the current path");
  return facts;
}

/** A look's markup for a node box: its replay count, width and centre filled in (the drawing's
 * placeholders, views/tree/frames.py). */
function lookMarkup(look, count, w, cx) {
  return look.markup.replace("\ue000", replays(count)).split("\ue001").join(w).split("\ue002").join(cx);
}
function lookCountText(look, count) { return look.count_template.replace("\ue000", replays(count)); }

/** The longest of a block's candidate labels (tab-separated, longest first) that fits `room`
 * px on one line (6.2 px a character, 6 px of padding), or undefined. */
function blockLabel(labels, room) {
  return labels.split("\t").find((t) => t.indexOf("\n") < 0 && t.length * 6.2 + 6 <= room);
}

// -- the step list's rows ---------------------------------------------------------------------------
// Only the rows in and around the list's view are in the document; a row's height is measured
// once it is laid out, and an estimate (or 40 px) stands for the rows not measured yet.

/** Each row's top in the list, then the whole list's height. */
function rowTops(n, heights, est) {
  const tops = [0];
  for (let i = 0; i < n; i++) tops.push(tops[i] + (heights[i] || est || 40));
  return tops;
}

/** The row at height y of the list (the first or last row beyond its ends). */
function rowAt(tops, n, y) {
  let a = 0, b = Math.max(n - 1, 0);
  while (a < b) { const mid = (a + b + 1) >> 1; if (tops[mid] <= y) a = mid; else b = mid - 1; }
  return a;
}

/** The rows [a, b) to have in the document: those within a view's height of the view at `y`,
 * or null while the rows built, [lo, hi), reach half a view beyond it. */
function rowsWanted(tops, n, lo, hi, y, viewH) {
  const v = Math.max(viewH, 300);
  if (lo < hi && (!lo || tops[lo] <= y - v / 2) && (hi === n || tops[hi] >= y + viewH + v / 2)) return null;
  return [rowAt(tops, n, y - v), Math.min(n, rowAt(tops, n, y + viewH + v) + 1)];
}

/** The list's scroll that shows row `cur`: y if it does, else the row a third of the way down. */
function scrollShowing(tops, n, cur, y, viewH) {
  if (!viewH || (tops[cur] >= y && tops[cur + 1] <= y + viewH)) return y;
  return Math.max(0, Math.min(tops[cur] - viewH / 3, tops[n] - viewH));
}

// -- asking for pictures ---------------------------------------------------------------------------
// A widget's pictures come from the kernel as asked for: step i at once, then its neighbours,
// nearest first, a few at a time and one such ask at a time, so that a jump's ask waits behind
// one small piece at most in the kernel; asks not sent yet are dropped by the next step's.
const ASK_NEAR = 16, ASK_AHEAD = 32, ASK_BATCH = 8, ASK_FORGET_MS = 10000;

function newAsks() { return {asked: {}, queue: [], flying: []}; }

/** The asks to send for step i of n (`have(k)`: step k's pictures are here), at time `now`
 * (ms): lists of step indices, step i's own first. */
function planAsks(asks, i, n, have, now) {
  asks.queue.forEach((ks) => ks.forEach((k) => { delete asks.asked[k]; }));
  asks.queue = [];
  const want = [];
  for (let d = 0; d <= ASK_AHEAD; d++) [i + d, i - d].forEach((k, j) => {
    if ((d || !j) && k >= 0 && k < n && (d <= ASK_NEAR || k > i) && !have(k) && !asks.asked[k]) { want.push(k); asks.asked[k] = 1; }
  });
  const out = [];
  if (want[0] === i) out.push(fly(asks, want.splice(0, 1), true, now));
  for (let j = 0; j < want.length; j += ASK_BATCH) asks.queue.push(want.slice(j, j + ASK_BATCH));
  const next = nextAsk(asks, now);
  if (next) out.push(next);
  return out;
}

function fly(asks, steps, shown, now) { asks.flying.push({shown, at: now}); return steps; }

/** The neighbours' next ask once none is in flight (an answer that never came is forgotten after
 * ASK_FORGET_MS), or null. */
function nextAsk(asks, now) {
  asks.flying = asks.flying.filter((f) => now - f.at < ASK_FORGET_MS);
  return asks.queue.length && !asks.flying.some((f) => !f.shown) ? fly(asks, asks.queue.shift(), false, now) : null;
}

/** A piece came, with the pictures of `steps`: the oldest ask is answered. */
function answered(asks, steps) {
  steps.forEach((k) => { delete asks.asked[k]; });
  asks.flying.shift();
}

/** Steps from `start` on were rewritten: what was asked for them is asked again when needed. */
function forgetAsks(asks, start) { for (const k in asks.asked) if (+k >= start) delete asks.asked[k]; }

// -- the tree's drawing ------------------------------------------------------------------------------
// (the `s` flag: a line break that reached a drawing's text, "\r", U+2028 or U+2029 among them,
// is still part of its group's line)
const WHOLE = /^(<g id="((?:node|edge)-[0-9-]+)".*<\/g>)(?:<\/svg>)?$/s, GROUP_END = /<\/g>(?:<\/svg>)?$/;
// a node or edge group's line in a drawing of the built-in layout, and a node's box (its place,
// width and its first rectangle's height, which is the box's or, when selected, its ring's)
const PART = /^<g id="((node|edge)-(\d+)(?:-(\d+))?)"/, NODE_BOX = /data-w="([\d.]+)"[^>]*translate\(([-\d.]+),([-\d.]+)\).*?<rect [^>]*?height="([\d.]+)"/s;
const ANYWHERE = [-Infinity, Infinity, -Infinity, Infinity];

/** The lines of a drawing, each node or edge group's whole: the drawings cgviz makes never cut
 * one (views/tree.py writes a name's line breaks as escapes), but a line break that reached one
 * would have the page store its pieces as lines of their own: joined again here. */
function groupLines(lines) {
  const out = [];
  for (let k = 0; k < lines.length; k++) {
    let line = lines[k];
    if (PART.test(line)) while (!GROUP_END.test(line) && k + 1 < lines.length) line += "\n" + lines[++k];
    out.push(line);
  }
  return out;
}

/** A built-in drawing's lines as its frame (size, legend, the edges' layer) and its groups by id,
 * in order, each with its line and its box [x0, x1, y0, y1] in the drawing's units (an edge's
 * spans its parent's and its child's; a box not found: anywhere, so it is always placed). */
function drawingParts(lines) {
  const frame = [], parts = {}, ids = [], edges = [];
  groupLines(lines).forEach((line) => {
    const m = PART.exec(line);
    if (!m) { frame.push(line); return; }
    const end = line.endsWith("</svg>"), p = {line: end ? line.slice(0, -6) : line, box: null, node: m[2] === "node"};
    parts[m[1]] = p; ids.push(m[1]);
    const b = p.node && NODE_BOX.exec(line);
    if (p.node) p.box = b ? [+b[2], +b[2] + +b[1], +b[3], +b[3] + +b[4]] : ANYWHERE;
    else edges.push([p, "node-" + m[3], "node-" + m[4]]);
    if (end) frame.push("</svg>");
  });
  edges.forEach(([p, a, b]) => {
    const u = parts[a] ? parts[a].box : ANYWHERE, v = parts[b] ? parts[b].box : ANYWHERE;
    p.box = [Math.min(u[0], v[0]), Math.max(u[1], v[1]), Math.min(u[2], v[2]), Math.max(u[3], v[3])];
  });
  return {frame, parts, ids};
}

/** The whole groups by which a drawing (line indices `next`) differs from the one shown (`shown`),
 * as WHOLE matches; null when a swap cannot make one the other (another size, a line not a
 * whole group, more than half changed, or not the same groups redrawn). */
function groupSwaps(lines, shown, next) {
  if (!shown || shown.length !== next.length) return null;
  const swaps = [], gone = [];
  for (let p = 0; p < next.length; p++) {
    if (next[p] === shown[p]) continue;
    const a = WHOLE.exec(lines[shown[p]]), b = WHOLE.exec(lines[next[p]]);
    if (!a || !b || swaps.length > next.length / 2) return null;
    gone.push(a[2]); swaps.push(b);
  }
  // the same groups, redrawn (edges may change places: those on the path are drawn last)
  return gone.sort().join() === swaps.map((m) => m[2]).sort().join() ? swaps : null;
}

/** Whether boxes [x0, x1, y0, y1] a and b overlap. */
function meets(a, b) { return a[0] <= b[1] && a[1] >= b[0] && a[2] <= b[3] && a[3] >= b[2]; }

/** The part of a drawing in a box's view scrolled to [x, y] and a quarter of a view around it, in
 * the drawing's units (`scale`: [factor, left, top] of the drawing in the box; w, h: the view). */
function sightAt([x, y], [f, ox, oy], w, h) {
  return [(x - w / 4 - ox) / f, (x + w * 1.25 - ox) / f, (y - h / 4 - oy) / f, (y + h * 1.25 - oy) / f];
}

/** The box's scroll that shows `box` (in the drawing's units): `scroll` as it is if it shows,
 * else with the box in the middle, per axis. */
function scrollShowingBox(box, scroll, [f, ox, oy], w, h) {
  const [x0, x1, y0, y1] = box;
  let [x, y] = scroll;
  if (ox + x0 * f < x || ox + x1 * f > x + w) x = Math.max(0, Math.round(ox + (x0 + x1) * f / 2 - w / 2));
  if (oy + y0 * f < y || oy + y1 * f > y + h) y = Math.max(0, Math.round(oy + (y0 + y1) * f / 2 - h / 2));
  return [x, y];
}

if (typeof module === "object" && module.exports) {
  module.exports = {
    positions, named, decodeHead, decodePiece, layout, lineIndex, newModel, applyHead, mergePiece, growModel,
    treeStateAt, treeStateOf, stepAt, nodesOfSnap, nodeShown, nodeFacts, replays, lookMarkup, lookCountText, blockLabel,
    rowTops, rowAt, rowsWanted, scrollShowing, newAsks, planAsks, nextAsk, answered, forgetAsks,
    groupLines, drawingParts, groupSwaps, meets, sightAt, scrollShowingBox,
  };
}
