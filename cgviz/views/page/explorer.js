// The cgviz explorer: one front end with two hosts. The HTML export mounts it on its page with
// the whole payload (`mount`); the Jupyter widget (an anywidget: `render`) gets the payload in
// pieces from the kernel. The payload is built by cgviz/views/page_data.py. Every lookup is
// scoped to the explorer's root element, so several explorers can share a document.

const ICON = (body) => '<svg viewBox="0 0 16 16" width="14" height="14" fill="currentColor" aria-hidden="true">' + body + "</svg>";
const SKELETON = '<header class="cg-header"></header><div class="cg-notices"></div><details class="cg-findings" hidden></details>' +
  '<div class="cg-controls">' +
  '<button class="cg-first" title="first step (Home)" aria-label="⏮ first step" disabled>' + ICON('<rect x="2" y="3" width="2.2" height="10"/><path d="M14 3v10L5 8z"/>') + "</button>" +
  '<button class="cg-prev" title="previous step (←)" aria-label="◀ previous step" disabled>' + ICON('<path d="M12 3v10L3.5 8z"/>') + "</button>" +
  '<button class="cg-next" title="next step (→)" aria-label="▶ next step" disabled>' + ICON('<path d="M4 3v10l8.5-5z"/>') + "</button>" +
  '<button class="cg-last" title="last step (End)" aria-label="⏭ last step" disabled>' + ICON('<path d="M2 3v10l9-5z"/><rect x="11.8" y="3" width="2.2" height="10"/>') + "</button>" +
  '<input class="cg-slider" type="range" min="0" max="0" value="0" aria-label="step" disabled>' +
  '<span class="cg-pos"></span><button class="cg-run" hidden title="call the workload once and follow the new steps">run next call</button>' +
  '<span class="cg-keys"></span></div>' +
  '<div class="cg-timeline-box" title="click to go to a step" hidden><div class="cg-timeline-inner"><div class="cg-timeline"></div><div class="cg-marker"></div></div></div>' +
  '<div class="cg-now"><div class="cg-headline"></div><div class="cg-reason"></div></div>' +
  '<div class="cg-banner" hidden></div><div class="cg-error" hidden></div>' +
  '<div class="cg-main">' +
  '<section class="panel cg-steps-panel"><h2>Steps <span class="sub cg-count"></span></h2><ol class="cg-steps"><li class="gap" aria-hidden="true"></li><li class="gap" aria-hidden="true"></li></ol></section>' +
  '<section class="panel cg-tree-panel"><h2>Tree after this step <label class="fit" title="shrink the tree to the panel\'s width"><input type="checkbox" class="cg-fit"> fit to width</label></h2><div class="cg-snapinfo"></div><div class="cg-tree-box"></div></section>' +
  '<section class="panel cg-node-panel"><h2>Node outputs</h2><div class="cg-node"></div></section>' +
  '<section class="panel cg-pool-panel"><h2>Memory pool <span class="sub">blocks of the node shown stand out</span></h2><div class="cg-pool-box"></div></section>' +
  '<section class="panel cg-graphs-panel" hidden><div class="cg-graphs"></div></section>' +
  "</div>";
// (the `s` flag: a line break that reached a drawing's text, "\r", U+2028 or U+2029 among them,
// is still part of its group's line)
const WHOLE = /^(<g id="((?:node|edge)-[0-9-]+)".*<\/g>)(?:<\/svg>)?$/s, GROUP_END = /<\/g>(?:<\/svg>)?$/;
// a node or edge group's line in a drawing of the built-in layout, and a node's box (its place,
// width and its first rectangle's height, which is the box's or, when selected, its ring's)
const PART = /^<g id="((node|edge)-(\d+)(?:-(\d+))?)"/, NODE_BOX = /data-w="([\d.]+)"[^>]*translate\(([-\d.]+),([-\d.]+)\).*?<rect [^>]*?height="([\d.]+)"/s;
const ANYWHERE = [-Infinity, Infinity, -Infinity, Infinity];
const ALL_SHOWN = 400;

function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; }
function msg(box, text) { box.textContent = ""; box.appendChild(el("p", "msg", text)); }
function lineIndex(r) { const out = []; for (let i = 0; i < r.length; i += 2) for (let j = r[i]; j < r[i] + r[i + 1]; j++) out.push(j); return out; }
function copyOf(m) { const o = {}; for (const k in m) o[k] = m[k]; return o; }
function replays(n) { return n + (n === 1 ? " replay" : " replays"); }
function natural(svg, side) { const w = svg.getAttribute(side) || "", v = parseFloat(w); return /pt$/.test(w) ? v * 4 / 3 : v; }
function naturalWidth(svg) { return natural(svg, "width"); }
function groupLines(lines) {
  // the lines of a drawing, each node or edge group's whole: the drawings cgviz makes never cut one
  // (views/tree.py writes a name's line breaks as escapes), but a line break that reached one would
  // have the page store its pieces as lines of their own: joined again here
  const out = [];
  for (let k = 0; k < lines.length; k++) {
    let line = lines[k];
    if (PART.test(line)) while (!GROUP_END.test(line) && k + 1 < lines.length) line += "\n" + lines[++k];
    out.push(line);
  }
  return out;
}
function byId(box, id) { return box.querySelector('[id="' + id + '"]'); }
function morph(a, b) {
  // make the shown element a look like b, replacing only the subtrees that differ
  if (a.isEqualNode(b)) return;
  const ka = a.childNodes, kb = b.childNodes;
  let same = a.nodeName === b.nodeName && ka.length === kb.length && a.attributes && b.attributes && a.attributes.length === b.attributes.length;
  for (let i = 0; same && i < a.attributes.length; i++) same = a.attributes[i].value === b.getAttribute(a.attributes[i].name);
  if (!same || !ka.length) { a.parentNode.replaceChild(b, a); return; }
  const xs = Array.from(ka), ys = Array.from(kb);
  for (let i = 0; i < xs.length; i++) morph(xs[i], ys[i]);
}

// The standalone page's host: the whole payload is there; `#step=N&node=M` in the address.
function pageHost() {
  return {
    keys: document,
    start() {
      const m = /step=(\d+)/.exec(location.hash), k = /node=(\d+)/.exec(location.hash);
      return {step: m ? +m[1] - 1 : 0, sel: k ? +k[1] : null};
    },
    shown(i, sel) { try { history.replaceState(null, "", "#step=" + (i + 1) + (sel != null ? "&node=" + sel : "")); } catch (e) { /* file: pages may refuse */ } },
    need() {},
    dark(set) {  // the reader's colour scheme
      const m = window.matchMedia("(prefers-color-scheme: dark)");
      set(m.matches); m.addEventListener("change", (e) => set(e.matches));
    },
    listen(view) { window.addEventListener("hashchange", () => { const s = this.start(); view.go(s.step, s.sel, true); }); },
  };
}

export function mount(root, D, host) {
  host = host || pageHost();
  root.classList.add("cgviz"); root.innerHTML = SKELETON;
  const q = (name) => root.querySelector(".cg-" + name);
  const slider = q("slider"), tbox = q("tree-box"), pbox = q("pool-box"), list = q("steps"), [gapTop, gapEnd] = list.children;
  let S = D.steps || [], N = D.n, cur = -1, sel = null, shownTree = -2, shownPool = -2, snapNodes = {}, asked = {};
  let shownLines = null, T = D.tree, tState = null, tAt = -1, shownStruct = -1, shownState = {}, hot = [], must = {};
  let parts = {}, partIds = [], edgeLayer = null, focus = [];
  let shownLegend = -1, boxW = 0, boxLimits = [0, Infinity], tScroll = [0, 0], poolW = 0, near = null, queue = [], flying = [];
  let made = new Map(), lo = 0, hi = 0, rowH = [], est = 0, pos = null, scrollY = 0, viewH = 0, anchor = -1, scrolling = false;

  // -- the head: header, notices, step list, timeline ----------------------------------------------
  const style = el("style"); root.appendChild(style);
  function head(h) {
    const hd = q("header"); hd.textContent = "";
    hd.appendChild(el("h1", null, h.title));
    const meta = el("div", "meta");
    (h.header.meta.length ? h.header.meta : [["meta", "none recorded"]]).forEach(([k, v]) => {
      const it = el("span", "meta-item"); it.appendChild(el("span", "meta-key", k)); it.appendChild(document.createTextNode(" " + v)); meta.appendChild(it);
    });
    hd.appendChild(meta);
    const counts = el("div", "counts", h.header.count + (h.header.kinds.length ? " — " : ""));
    h.header.kinds.forEach(([k, v], j) => { if (j) counts.appendChild(document.createTextNode(" · ")); counts.appendChild(el("span", "k-" + k + " kc", v + " " + k)); });
    hd.appendChild(counts);
    const nb = q("notices"); nb.textContent = "";
    h.notices.forEach((t) => nb.appendChild(el("p", "notice", t)));
    const digits = String(h.n).length + 1;
    style.textContent = ".cgviz{" + (h.css || "") + "}" + Object.keys(h.colors).map((k) => ".cgviz .k-" + k + "{--k:" + h.colors[k] + "}").join("") +
      ".cgviz .cg-steps .sn{min-width:" + digits + "ch}.cgviz .cg-steps .why{padding-left:" + digits + "ch}";
    root.classList.toggle("no-pictures", !!h.empty);
    N = h.n; D.tx = h.tx; D.empty = h.empty; D.widened = h.widened; D.repeats = h.repeats;
    D.rows = (D.rows || []).slice(0, h.start).concat(h.rows);
    forget(h.start);
    while (S.length < N) S.push(null);
    q("count").textContent = N;
    if (h.timeline) q("timeline").innerHTML = h.timeline;
    q("timeline-box").hidden = !h.timeline;
    slider.max = Math.max(N - 1, 0);
    [q("first"), q("prev"), q("next"), q("last"), slider].forEach((b) => { b.disabled = !N; });
    q("keys").textContent = "← → Home End" + (h.empty ? "" : " · click a node");
    q("pos").textContent = N + " steps";
    if (!N) { q("headline").textContent = h.empty; msg(tbox, h.empty); }
    msg(q("node"), N ? "Click a node in the tree to see its outputs." : "");
    findings(h.findings || []);
    // the CUDA graphs made outside the trees (views/graph_list.py: escaped HTML, no script)
    q("graphs").innerHTML = h.graphs || ""; q("graphs-panel").hidden = !h.graphs;
    root.classList.toggle("has-graphs", !!h.graphs); D.graphStep = h.graph_step;
  }
  function markGraph(g) {
    // the entries of the step's graph in the list of CUDA graphs (data-graphs: their graphs' ids)
    const box = q("graphs");
    box.querySelectorAll(".cg-gl-cur").forEach((e) => e.classList.remove("cg-gl-cur"));
    if (g != null) box.querySelectorAll('[data-graphs~="' + g + '"]').forEach((e) => e.classList.add("cg-gl-cur"));
  }
  function findings(fs) {
    // cgviz.diagnose's findings (page_data: errors, then warnings, then infos): each title goes to
    // its first evidence step, each step number to that step. Errors and warnings show; infos
    // fold away under them. What the reader opened or closed stays so when the head is resent.
    const box = q("findings"), was = box.dataset.serious, infos = box.querySelector(".cg-infos");
    const serious = fs.filter((f) => f.severity !== "info"), notes = fs.filter((f) => f.severity === "info");
    const keepOpen = box.open, keepInfos = infos ? infos.open : false;
    box.textContent = ""; box.hidden = !fs.length;
    if (!fs.length) return;
    const sum = el("summary", null, "Findings "), by = {};
    fs.forEach((f) => { by[f.severity] = (by[f.severity] || 0) + 1; });
    sum.appendChild(el("span", "sub", Object.keys(by).map((k) => by[k] + " " + k + (k === "info" || by[k] === 1 ? "" : "s")).join(" · ")));
    box.appendChild(sum);
    const group = (items) => { const ul = el("ul"); items.forEach((f) => ul.appendChild(finding(f))); return ul; };
    if (serious.length) box.appendChild(group(serious));
    if (notes.length && serious.length) {
      const d = el("details", "cg-infos"); d.open = keepInfos;
      d.appendChild(el("summary", null, notes.length + " info")); d.appendChild(group(notes)); box.appendChild(d);
    } else if (notes.length) box.appendChild(group(notes));
    box.open = was == null ? serious.length > 0 : keepOpen || serious.length > +was;
    box.dataset.serious = serious.length;
    markFindings();
  }
  function finding(f) {
    const li = el("li", "sev-" + f.severity);
    li.appendChild(el("span", "sev", f.severity));
    const body = el("div"), t = el(f.step == null ? "span" : "button", "f-title", f.title);
    if (f.step != null) { t.dataset.step = f.step; t.title = "go to step " + (f.step + 1); }
    body.appendChild(t); li.appendChild(body);
    if (f.steps.length) {
      const at = el("span", "f-steps", f.steps.length === 1 ? " step " : " steps ");
      f.steps.slice(0, 12).forEach((s, j) => {
        if (j) at.appendChild(document.createTextNode(", "));
        const b = el("button", "f-step", s + 1); b.dataset.step = s; b.title = "go to step " + (s + 1); at.appendChild(b);
      });
      if (f.steps.length > 12) at.appendChild(document.createTextNode(" … +" + (f.steps.length - 12)));
      body.appendChild(at);
    }
    if (f.suggestion) body.appendChild(el("div", "fix", "fix: " + f.suggestion));
    return li;
  }
  function markFindings() {
    q("findings").querySelectorAll(".f-step").forEach((b) => b.classList.toggle("at", +b.dataset.step === cur));
  }

  // -- the step list -------------------------------------------------------------------------------
  // Only the rows in and around the list's view are in the document (10,000 rows made every step's
  // style, layout and paint cost); two gaps, before and after them, stand for the others. A row's
  // height is measured once it is laid out (a long headline wraps); an estimate stands for the
  // rows not seen yet.
  function row(i) {
    const [kind, hl, why, note, times] = D.rows[i], li = el("li", "k-" + kind + (i === cur ? " cur" : ""));
    li.dataset.i = i;
    li.appendChild(el("span", "sn", i + 1)); li.appendChild(el("span", "hl", hl));
    if (note) li.appendChild(el("span", "blk", note));
    li.appendChild(el("span", "why", why));
    if (times > 1) li.dataset.fold = times;
    measured.observe(li);
    return li;
  }
  function tops() {
    // each row's top in the list, then the whole list's height (40 px a row before any is measured)
    if (!pos) { pos = [0]; for (let i = 0; i < N; i++) pos.push(pos[i] + (rowH[i] || est || 40)); }
    return pos;
  }
  function rowAt(y) {
    const p = tops(); let a = 0, b = Math.max(N - 1, 0);
    while (a < b) { const m = (a + b + 1) >> 1; if (p[m] <= y) a = m; else b = m - 1; }
    return a;
  }
  function rows() {
    // the rows within a view's height of the list's view (of the current row while the list has
    // no size); built again only when the view comes within half a view of the built ones' ends
    const p = tops(), y = viewH ? scrollY : p[Math.max(cur, 0)], v = Math.max(viewH, 300);
    if (lo < hi && (!lo || p[lo] <= y - v / 2) && (hi === N || p[hi] >= y + viewH + v / 2)) return;
    const a = rowAt(y - v), b = Math.min(N, rowAt(y + viewH + v) + 1);
    made.forEach((li, i) => { if (i < a || i >= b) drop(li, i); });
    const front = document.createDocumentFragment(), back = document.createDocumentFragment();
    for (let i = a; i < b; i++) if (!made.has(i)) { const li = row(i); made.set(i, li); (i < lo ? front : back).appendChild(li); }
    gapTop.after(front); gapEnd.before(back);
    lo = a; hi = b; pad();
  }
  function drop(li, i) { li.remove(); measured.unobserve(li); made.delete(i); }
  function pad() { const p = tops(); gapTop.style.height = p[lo] + "px"; gapEnd.style.height = p[N] - p[hi] + "px"; }
  function forget(from) {
    // rows from `from` on are new or were rewritten (a fold): built and measured again
    made.forEach((li, i) => { if (i >= from) drop(li, i); });
    hi = Math.min(hi, from); lo = Math.min(lo, hi); rowH.length = Math.min(rowH.length, from); pos = null;
  }
  function reveal() {
    // scroll the step list (only it) so that the current row shows, a third of the way down; the
    // rows now, the scroll at the next frame (set now, it would make the browser lay out the page
    // before the step's other changes, and again after them)
    const y = inView(scrollY);
    anchor = -1;
    if (y !== scrollY) {
      if (!scrolling) requestAnimationFrame(() => { scrolling = false; list.scrollTop = scrollY; });
      scrollY = y; scrolling = true;
    }
    rows();
  }
  function inView(y) {
    // the list's scroll that shows the current row: y if it does, else the row a third of the way down
    const p = tops();
    return !viewH || (p[cur] >= y && p[cur + 1] <= y + viewH) ? y : Math.max(0, Math.min(p[cur] - viewH / 3, p[N] - viewH));
  }
  // rows laid out: their heights replace the estimate, and the list scrolls by what that moved the
  // anchor (the first row shown once the reader scrolls; until then the current row, kept in view)
  const measured = new ResizeObserver((es) => {
    const k = anchor < 0 ? cur : anchor, at = tops()[k];
    let sum = 0, n = 0;
    es.forEach((e) => {
      const i = +e.target.dataset.i, h = e.borderBoxSize[0].blockSize;
      if (h && i < N && rowH[i] !== h) { rowH[i] = h; sum += h; n++; }
    });
    if (!n) return;
    if (!est) est = sum / n;  // the first rows measured stand for the others
    pos = null;
    pad();
    const y = scrollY + tops()[k] - at, to = anchor < 0 ? inView(y) : y;
    if (to !== scrollY && viewH) list.scrollTop = scrollY = to;
  });
  function merge(p) {
    // a piece of pictures: new items append to the lists (indices never change), `at` fills steps;
    // a widget's trees come as drawings plus node states (views/tree_windows.py)
    ["lines", "trees", "nodes", "snaps", "banners", "segs", "pstyles", "ptexts", "legends", "pools"].forEach((k) => { D[k] = (D[k] || []).concat(p[k] || []); });
    if (p.tree && p.tree !== T) {
      if (!T) T = {structs: [], looks: [], keys: {}, delta: {}};
      T.structs = T.structs.concat(p.tree.structs); T.looks = T.looks.concat(p.tree.looks);
      Object.assign(T.keys, p.tree.keys); Object.assign(T.delta, p.tree.delta);
    }
    for (const i in p.at || {}) { S[+i] = p.at[i]; delete asked[i]; }
  }

  // -- the tree ------------------------------------------------------------------------------------
  function setTree(t) {
    // a tree that differs from the one shown only in whole node or edge groups: swap just those
    // (a big tree's layout is what costs; the browser then lays out only what changed)
    const svg = tbox.querySelector("svg"), next = lineIndex(D.trees[t]);
    let swaps = [], gone = [];
    if (svg && shownLines && shownLines.length === next.length) {
      for (let p = 0; p < next.length; p++) {
        if (next[p] === shownLines[p]) continue;
        const a = WHOLE.exec(D.lines[shownLines[p]]), b = WHOLE.exec(D.lines[next[p]]);
        if (!a || !b || swaps.length > next.length / 2) { swaps = null; break; }
        gone.push(a[2]); swaps.push(b);
      }
      // the same groups, redrawn (edges may change places: those on the path are drawn last)
      if (swaps && gone.sort().join() !== swaps.map((m) => m[2]).sort().join()) swaps = null;
    } else swaps = null;
    if (swaps) {
      const tmp = document.createElementNS(svg.namespaceURI, "g");
      tmp.innerHTML = swaps.map((m) => m[1]).join("");
      while (tmp.firstElementChild) {
        const g = tmp.firstElementChild, old = byId(svg, g.id);
        if (old) old.parentNode.replaceChild(g, old); else tmp.removeChild(g);
      }
    } else if (svg) {
      const fresh = el("div"); fresh.innerHTML = next.map((j) => D.lines[j]).join("\n");
      morph(svg, fresh.firstElementChild);
    } else tbox.innerHTML = next.map((j) => D.lines[j]).join("\n");
    shownLines = next;
  }
  function stateOf(f) { const m = {}; for (let j = 0; j < f.length; j += 3) m[f[j]] = [f[j + 1], f[j + 2]]; return m; }
  function stateAt(i) {
    // node id -> [look, replays] after step i: from the whole state kept nearest before i (the
    // page keeps one every T.every steps; a widget's piece, one per run of steps), or from the
    // state last computed when that is nearer; then the deltas up to i
    let k = i; while (k > 0 && !T.keys[k]) k--;
    if (!tState || tAt > i || tAt < k) { tState = stateOf(T.keys[k] || []); tAt = k; }
    for (let s = tAt + 1; s <= i; s++) {
      const d = T.delta[s] || [];
      for (let j = 0; j < d.length; j += 3) { if (d[j + 1] < 0) delete tState[d[j]]; else tState[d[j]] = [d[j + 1], d[j + 2]]; }
    }
    tAt = i; return tState;
  }
  function paintNode(g, v, was) {
    // a new replay count alone rewrites one text; a new look redraws the box
    const L = T.looks[v[0]];
    if (was[0] === v[0]) { g.getElementsByTagName("text")[L[3]].textContent = L[4].replace("\ue000", replays(v[1])); return; }
    g.setAttribute("class", L[0] + (sel != null && g.id === "node-" + sel ? " cg-sel" : "")); g.setAttribute("fill", L[1]);
    g.innerHTML = L[2].replace("\ue000", replays(v[1])).split("\ue001").join(g.dataset.w).split("\ue002").join(g.dataset.cx);
  }
  function setTreeState(i, st) {
    // the structure's drawing once; then the step's state, painted where it shows (paintNodes)
    if (st[0] !== shownStruct) {
      const s = T.structs[st[0]];
      drawStructure(lineIndex(D.trees[s[0]]).map((j) => D.lines[j])); shownStruct = st[0]; hot = []; near = null;
      shownState = s[2] ? stateOf(s[2]) : copyOf(stateAt(s[1]));
    }
    stateAt(i);
    // the nodes this step names, and those the step before named, are painted wherever they are
    const now = {}, sn = D.snaps[st[2]];
    [st[3], sn.cur, sel].forEach((id) => { if (id != null) now[id] = 1; });
    const both = copyOf(must); for (const id in now) both[id] = 1;
    must = now; focus = [sel, st[3], sn.cur]; markPath(sn.path);
    return both;
  }
  function paintNodes(also) {
    // repaint the nodes whose look or replay count differ from the step's: those in view or near it
    // (a quarter of a view around), and `also`; the others when scrolled to (a jump then costs what
    // shows)
    if (!T || shownStruct < 0) return;
    const sight = inSight();
    place(sight);
    for (const id in tState) {
      const a = shownState[id], v = tState[id];
      if (a[0] === v[0] && a[1] === v[1]) continue;
      if (!(also && also[id]) && !meets(parts["node-" + id].box, sight)) continue;
      paintNode(part("node-" + id), v, a); shownState[id] = v;
    }
  }
  function inSight() {
    // the drawing's part in the tree box's view and a quarter of a view around it, in the drawing's
    // units, worked out from the box's size and scroll as last seen (reading them after a step's
    // changes would make the browser lay out the page there and then)
    if (!near) near = sightAt(tScroll);
    return near;
  }
  function sightAt([x, y]) {
    const [f, ox, oy] = scale(), w = boxW + 12, h = boxHeight(f);
    return [(x - w / 4 - ox) / f, (x + w * 1.25 - ox) / f, (y - h / 4 - oy) / f, (y + h * 1.25 - oy) / f];
  }
  function scale() {
    // the drawing's scale in the box, and its left and top in the box's scrolled content: 6 px
    // of padding in, centred when narrower than the box (page.css)
    const svg = tbox.querySelector("svg"), nat = naturalWidth(svg), f = tbox.classList.contains("fit") ? Math.min(1, boxW / nat) : 1;
    return [f, 6 + Math.max(0, (boxW - nat * f) / 2), 6];
  }
  function meets(b, s) { return b[0] <= s[1] && b[1] >= s[0] && b[2] <= s[3] && b[3] >= s[2]; }

  // -- the tree's groups: a big tree keeps in the document only those in sight ---------------------
  // Laying out and painting a thousand node groups was most of a far jump's frame, so a tree of
  // more than ALL_SHOWN groups has in the document only the node and edge groups in or near the
  // box's view; the others stay lines of text until scrolled to. A smaller tree is all there (find
  // in page sees every node). A group once built is kept, with what was painted on it.
  function drawStructure(lines) {
    // the drawing without its groups (its frame: size, legend, the edges' layer), then the groups' boxes
    const frame = [], edges = [];
    parts = {}; partIds = [];
    groupLines(lines).forEach((line) => {
      const m = PART.exec(line);
      if (!m) { frame.push(line); return; }
      const end = line.endsWith("</svg>"), p = {line: end ? line.slice(0, -6) : line, el: null, on: false, box: null, node: m[2] === "node"};
      parts[m[1]] = p; partIds.push(m[1]);
      const b = p.node && NODE_BOX.exec(line);  // a box not found: the group is placed whatever the view
      if (p.node) p.box = b ? [+b[2], +b[2] + +b[1], +b[3], +b[3] + +b[4]] : ANYWHERE;
      else edges.push([p, "node-" + m[3], "node-" + m[4]]);
      if (end) frame.push("</svg>");
    });
    edges.forEach(([p, a, b]) => {  // an edge runs between its parent's and its child's boxes
      const u = parts[a] ? parts[a].box : ANYWHERE, v = parts[b] ? parts[b].box : ANYWHERE;
      p.box = [Math.min(u[0], v[0]), Math.max(u[1], v[1]), Math.min(u[2], v[2]), Math.max(u[3], v[3])];
    });
    tbox.innerHTML = frame.join("\n");
    edgeLayer = tbox.querySelector(".cgviz-edges");
  }
  function place(sight) {
    // the groups in sight into the document, those out of it out (all of them for a small tree)
    const svg = tbox.querySelector("svg"), add = [], culled = partIds.length > ALL_SHOWN;
    partIds.forEach((id) => {
      const p = parts[id], want = !culled || meets(p.box, sight);
      if (want && !p.on) add.push(id);
      else if (!want && p.on) { p.el.remove(); p.on = false; }
    });
    build(add);
    add.forEach((id) => {
      const p = parts[id], e = p.el; p.on = true;
      if (p.node) { e.classList.toggle("cg-sel", id === "node-" + sel); svg.appendChild(e); }
      else if (e.classList.contains("on-path")) edgeLayer.appendChild(e);  // the path's edges drawn last
      else edgeLayer.insertBefore(e, edgeLayer.firstChild);
    });
  }
  function build(ids) {
    // the groups of these ids as elements, from their lines (parsed together)
    const todo = ids.filter((id) => !parts[id].el);
    if (!todo.length) return;
    const tmp = document.createElementNS(tbox.querySelector("svg").namespaceURI, "g");
    tmp.innerHTML = todo.map((id) => parts[id].line).join("");
    Array.from(tmp.children).forEach((e) => { parts[e.id].el = e; });
  }
  function part(id) { const p = parts[id]; if (!p) return null; build([id]); return p.el; }
  function markPath(path) {
    // the edges of the current path take their path stroke, drawn last (over their siblings' elbows)
    hot.forEach((e) => e.classList.remove("on-path"));
    hot = [];
    for (let j = 0; j + 1 < path.length; j++) {
      const e = part("edge-" + path[j] + "-" + path[j + 1]);
      if (e) { e.classList.add("on-path"); if (e.parentNode) e.parentNode.appendChild(e); hot.push(e); }
    }
  }
  function markSelected() {
    tbox.querySelectorAll(".cg-sel").forEach((g) => g.classList.remove("cg-sel"));
    if (sel == null) return;
    const g = shownStruct >= 0 ? part("node-" + sel) : byId(tbox, "node-" + sel);
    if (g) g.classList.add("cg-sel");
  }
  function measure() {
    const cs = getComputedStyle(tbox);
    boxW = tbox.clientWidth - 12; boxLimits = [parseFloat(cs.minHeight) || 0, parseFloat(cs.maxHeight) || Infinity];
    poolW = pbox.clientWidth; near = null;
  }
  function boxHeight(f) {
    // the tree box's height as the drawing makes it (its min- and max-height around the drawing and
    // the padding), less a scrollbar when the drawing is wider: known before the browser lays it out
    const svg = tbox.querySelector("svg"), wide = naturalWidth(svg) * f > boxW;
    return Math.min(boxLimits[1], Math.max(boxLimits[0], natural(svg, "height") * f + 12 + (wide ? 15 : 0))) - (wide ? 15 : 0);
  }
  function placeTree(also) {
    // shrink a tree a little too wide for the panel; otherwise keep its size and scroll to the node
    // of interest (a big tree's groups are placed where the scroll will be, before it is set)
    const svg = tbox.querySelector("svg"); if (!svg) return;
    if (!boxW) measure();
    const nat = naturalWidth(svg), fit = q("fit").checked || (nat > boxW && boxW / nat >= 0.6), far = !fit && nat > boxW;
    if (tbox.classList.contains("fit") !== fit) { tbox.classList.toggle("fit", fit); near = null; }
    if (shownStruct < 0) { if (far) requestAnimationFrame(scrollToNode); return; }
    const to = far ? aim() : tScroll;
    if (to[0] !== tScroll[0] || to[1] !== tScroll[1]) { tScroll = to; near = null; requestAnimationFrame(() => scrollTree(to)); }
    paintNodes(also);
  }
  function aim() {
    // the box's scroll that shows the node of interest (the one selected, else the step's, else the
    // current one): as it is if the node shows, else with the node in the middle
    const id = focus.find((k) => k != null && parts["node-" + k]);
    if (id == null) return tScroll;
    const [f, ox, oy] = scale(), [x0, x1, y0, y1] = parts["node-" + id].box, w = boxW + 12, h = boxHeight(f);
    let [x, y] = tScroll;
    if (ox + x0 * f < x || ox + x1 * f > x + w) x = Math.max(0, Math.round(ox + (x0 + x1) * f / 2 - w / 2));
    if (oy + y0 * f < y || oy + y1 * f > y + h) y = Math.max(0, Math.round(oy + (y0 + y1) * f / 2 - h / 2));
    return [x, y];
  }
  function scrollTree([x, y]) {
    // at the next frame (set mid-step, the scroll would make the browser lay out the page then);
    // the box may not scroll that far: then the groups in sight are placed for where it stopped
    tbox.scrollLeft = x; tbox.scrollTop = y;
    const at = [tbox.scrollLeft, tbox.scrollTop];
    if (at[0] !== x || at[1] !== y) { tScroll = at; near = null; paintNodes(); }
  }
  function scrollToNode() {
    // a picture drawn whole (no tree states): its node of interest into view
    const b = tbox.getBoundingClientRect(), g = tbox.querySelector(".cg-sel") || tbox.querySelector(".state-active") || tbox.querySelector(".state-current");
    if (!g) return;
    const r = g.getBoundingClientRect();
    if (r.left < b.left || r.right > b.right) tbox.scrollLeft += (r.left + r.right) / 2 - (b.left + b.right) / 2;
    if (r.top < b.top || r.bottom > b.bottom) tbox.scrollTop += (r.top + r.bottom) / 2 - (b.top + b.bottom) / 2;
  }

  // -- the pool ------------------------------------------------------------------------------------
  // Laid out here from records (views/pool_data.py): a row per segment, kept per segment, so a
  // step that changes one segment rebuilds one row.
  function setPool(t) {
    const [title, sub, segs, legend, widened] = D.pools[t];
    let box = pbox.querySelector(".cg-pool");
    if (!box) {
      pbox.textContent = ""; box = el("div", "cg-pool");
      box.innerHTML = '<div class="cg-pool-title"></div><div class="cg-pool-sub"></div><div class="cg-pool-body">' +
        '<div class="cg-pool-rows"></div><ul class="cg-pool-legend"></ul></div><p class="cg-pool-foot"></p>';
      pbox.appendChild(box); shownLegend = -1;
    }
    box.querySelector(".cg-pool-title").textContent = title;
    box.querySelector(".cg-pool-sub").textContent = sub;
    box.querySelector(".cg-pool-foot").textContent = widened ? D.widened : "";
    box.classList.toggle("compact", segs.length > 24);
    const rows = box.querySelector(".cg-pool-rows");
    while (rows.children.length > segs.length) rows.lastChild.remove();
    segs.forEach((s, k) => segRow(rows.children[k] || rows.appendChild(newSegRow()), s));
    if (legend !== shownLegend) {
      shownLegend = legend;
      const ul = box.querySelector(".cg-pool-legend"); ul.textContent = "";
      D.legends[legend].forEach(([style, text, node]) => {
        const [cat, color] = D.pstyles[style], li = el("li", "c-" + cat);
        const sw = el("span", "sw"); if (color) sw.style.setProperty("--c", color); else sw.hidden = true;
        li.appendChild(sw); li.appendChild(el("span", null, text));
        if (node >= 0) li.dataset.node = node;
        ul.appendChild(li);
      });
    }
  }
  // A step mostly changes blocks' colours, not their places: the rows and blocks shown are
  // reused, and a block changed only where its record differs (new elements for a thousand
  // blocks made every far jump lay out and paint the whole pool).
  function newSegRow() {
    const row = el("div", "cg-seg"); row.appendChild(el("div", "cg-seg-label")); row.appendChild(el("div", "cg-bar")); return row;
  }
  function segRow(row, s) {
    if (row.cgSeg === s) return;
    row.cgSeg = s;
    const [label, b] = D.segs[s], bar = row.lastChild, blocks = bar.children;
    row.firstChild.textContent = label;
    while (blocks.length > b.length / 6) bar.lastChild.remove();
    if (!poolW) measure();
    const px = Math.max(poolW - 330, 200) / 10000;  // the bar's width, roughly, per unit
    for (let k = 0; k < b.length; k += 6) {
      const blk = blocks[k / 6] || bar.appendChild(el("div")), rec = b.slice(k, k + 6).join();
      if (blk.cgRec === rec) continue;
      blk.cgRec = rec;
      const [cat, color, tone] = D.pstyles[b[k + 2]], left = b[k] / 100 + "%", width = b[k + 1] / 100 + "%";
      blk.className = "cg-blk c-" + cat;
      if (blk.style.left !== left) blk.style.left = left;
      if (blk.style.width !== width) blk.style.width = width;
      blk.style.setProperty("--c", color); blk.style.setProperty("--t", tone);
      if (b[k + 3] >= 0) blk.dataset.node = b[k + 3]; else delete blk.dataset.node;
      blk.title = D.ptexts[b[k + 4]];
      const room = b[k + 1] * px, fits = D.ptexts[b[k + 5]].split("\t").find((t) => t.indexOf("\n") < 0 && t.length * 6.2 + 6 <= room);
      if (fits) { if (!blk.firstChild) blk.appendChild(el("span")); blk.firstChild.textContent = fits; } else if (blk.firstChild) blk.textContent = "";
    }
  }
  function poolMark(id) {
    pbox.querySelectorAll(".on").forEach((g) => g.classList.remove("on"));
    const mine = id == null ? [] : pbox.querySelectorAll('[data-node="' + id + '"]');
    mine.forEach((g) => g.classList.add("on"));
    pbox.classList.toggle("hl", mine.length > 0);
  }

  // -- the node panel ------------------------------------------------------------------------------
  function nodesOf(si) {
    if (!snapNodes[si]) { const m = {}; lineIndex(D.snaps[si].n).forEach((j) => { m[D.nodes[j][0]] = D.nodes[j]; }); snapNodes[si] = m; }
    return snapNodes[si];
  }
  function nodeTable(st) {
    // the selected node's outputs, or the step's node, or the current one; returns the node shown
    const box = q("node"), si = st[2];
    if (si < 0) { msg(box, "No snapshot for this step."); return null; }
    const snap = D.snaps[si], nodes = nodesOf(si);
    let id = sel, how = "selected · click it again to follow the steps";
    if (id == null || !nodes[id]) {
      how = id != null ? "node " + id + " does not exist at this step; showing " : "";
      id = st[3] != null && nodes[st[3]] ? st[3] : snap.cur;
      how += id == null ? "" : (id === st[3] ? "the node of this step" : "the current node") + " · click a node to pin it";
    }
    if (id == null || !nodes[id]) { msg(box, Object.keys(nodes).length ? "Click a node in the tree to see its outputs." : "No nodes yet."); return null; }
    const n = nodes[id]; box.textContent = "";
    box.appendChild(el("div", "how", how));
    box.appendChild(el("div", "title", n[1] + " · node " + n[0]));
    const facts = [n[2] === "graph" ? "recorded graph" : "warmup run", "generation " + n[5], replays(n[6]),
      n[3] == null ? "a root" : "parent " + n[3], n[4].length ? "children " + n[4].join(", ") : "no children"];
    if (snap.cur === n[0]) facts.push("current node"); else if (snap.path.indexOf(n[0]) >= 0) facts.push("on the current path");
    box.appendChild(el("div", "facts", facts.join(" · ")));
    if (n[7]) box.appendChild(el("div", "facts", "inputs: " + n[7]));
    profileOf(box, n[0]);
    if (!n[8].length) { box.appendChild(el("p", "msg", "No outputs.")); return id; }
    const t = el("table"), h = el("tr"), alias = n[8].some((o) => o[6]);
    const cols = ["state", "#", "shape", "dtype", "size", "address"].concat(alias ? ["alias of"] : []);
    cols.forEach((c) => h.appendChild(el("th", null, c)));
    t.appendChild(h);
    n[8].forEach((o) => {
      const tr = el("tr");
      tr.appendChild(el("td", "st-" + o[1], ({live: "● ", dead: "○ ", invalid: "✕ "}[o[1]] || "") + o[1])); tr.appendChild(el("td", null, o[0]));
      tr.appendChild(el("td", null, o[2])); tr.appendChild(el("td", null, o[3])); tr.appendChild(el("td", null, o[4]));
      tr.appendChild(el("td", "addr", o[5])); if (alias) tr.appendChild(el("td", null, o[6]));
      t.appendChild(tr);
      if (o[7]) {  // the values kept with Tree(values=True): a line of their own under the row
        const vr = el("tr", "vals"), td = el("td", null, "values " + o[7]); td.colSpan = cols.length; vr.appendChild(td); t.appendChild(vr);
      }
    });
    const wrap = el("div", "table-wrap"); wrap.appendChild(t); box.appendChild(wrap);
    return id;
  }

  function profileOf(box, id) {
    // what the node costs and holds (Tree(profile=True)): its times, and its graph's kernels grouped by name
    const p = (D.profile || {})[id];
    if (!p) return;
    if (p.time) box.appendChild(el("div", "facts cg-time", "time: " + p.time));
    if (!p.kernels.length) return;
    const total = p.kernels.reduce((a, k) => a + k[1], 0), d = el("details", "cg-kernels");
    d.appendChild(el("summary", null, total + " graph node" + (total === 1 ? "" : "s") + " (kernels, copies)"));
    const ul = el("ul");
    p.kernels.forEach(([label, count, full]) => { const li = el("li", null, count + "× " + label); li.title = full; ul.appendChild(li); });
    d.appendChild(ul); box.appendChild(d);
  }

  // -- a step --------------------------------------------------------------------------------------
  function ask(i) {
    // the pictures of the steps around i that have not arrived (a widget's host asks the kernel for
    // them): step i at once, then its neighbours, nearest first, a few at a time and one such ask
    // at a time, so that a jump's ask waits behind one small piece at most in the kernel; asks not
    // sent yet are dropped
    queue.forEach((ks) => ks.forEach((k) => { delete asked[k]; }));
    queue = [];
    const want = [];
    for (let d = 0; d <= 32; d++) [i + d, i - d].forEach((k, j) => {
      if ((d || !j) && k >= 0 && k < N && (d <= 16 || k > i) && !S[k] && !asked[k]) { want.push(k); asked[k] = 1; }
    });
    if (!want.length) return;
    if (want[0] === i) send(want.splice(0, 1), true);
    for (let j = 0; j < want.length; j += 8) queue.push(want.slice(j, j + 8));
    pump();
  }
  function send(steps, shown) { flying.push([shown, Date.now()]); host.need(steps); }
  function pump() {
    // the next neighbours' ask once none is in flight (a reply that never came is forgotten after 10 s)
    const t = Date.now();
    flying = flying.filter((f) => t - f[1] < 10000);
    if (queue.length && !flying.some((f) => !f[0])) send(queue.shift(), false);
  }
  function show(i, quiet) {
    if (!N) return;
    i = Math.max(0, Math.min(N - 1, i | 0));
    const st = S[i], R = D.rows[i];
    if (made.has(cur)) made.get(cur).classList.remove("cur");
    cur = i; reveal(); made.get(cur).classList.add("cur");
    markFindings();
    q("now").className = "cg-now k-" + R[0];
    // the kind's word in its colour (after "rank r · " in a merged trace)
    const hl = q("headline"), text = R[1] + R[3], at = Math.max(text.indexOf(R[0]), 0), end = at + R[0].length;
    hl.textContent = "";
    hl.appendChild(el("span", null, "step " + (i + 1) + "/" + N + " · " + text.slice(0, at)));
    hl.appendChild(el("span", "kind", text.slice(at, end)));
    if (end < text.length) hl.appendChild(el("span", null, text.slice(end)));
    q("reason").textContent = R[2];
    slider.value = i; q("pos").textContent = "step " + (i + 1) + " / " + N;
    q("first").disabled = q("prev").disabled = i === 0; q("last").disabled = q("next").disabled = i === N - 1;
    if (D.tx && D.tx.length > i) q("marker").style.left = (D.tx[i] * 100) + "%";
    markGraph(R[5]);
    ask(i);
    if (!quiet) host.shown(i, sel);
    if (!st) { root.classList.add("loading"); return; }
    root.classList.remove("loading");
    const b = q("banner");
    if (st[4] >= 0) {
      const bn = D.banners[st[4]]; b.textContent = ""; b.appendChild(el("div", null, bn.head));
      if (bn.items.length) { const ul = el("ul"); bn.items.forEach((t) => ul.appendChild(el("li", null, t))); b.appendChild(ul); }
      b.hidden = false;
    } else b.hidden = true;
    let also;
    if (st[0] < 0) {
      // no tree: the whole trace's reason, or a CUDA graph's step (-3), or no snapshot kept (-1)
      const none = R[5] != null && !D.empty ? -3 : -1;
      if (shownTree !== none) {
        shownTree = none; shownStruct = -1; shownLines = null;
        msg(tbox, D.empty || (none === -3 ? D.graphStep : "No snapshot was recorded for this step."));
      }
    } else if (T) { shownTree = -2; also = setTreeState(i, st); }
    else if (st[0] !== shownTree) { shownTree = st[0]; setTree(st[0]); }
    markSelected(); placeTree(also);
    if (st[1] !== shownPool) { shownPool = st[1]; if (st[1] >= 0) setPool(st[1]); else msg(pbox, "No snapshot of the pool for this step."); }
    q("snapinfo").textContent = st[2] < 0 ? "" : snapInfo(D.snaps[st[2]], R[4]);
    poolMark(nodeTable(st));
  }
  function snapInfo(sn, times) { return sn.info + (times > 1 ? D.repeats.replace("{n}", times) : ""); }


  // -- wiring --------------------------------------------------------------------------------------
  head(D);
  q("first").onclick = () => show(0);
  q("prev").onclick = () => show(cur - 1);
  q("next").onclick = () => show(cur + 1);
  q("last").onclick = () => show(N - 1);
  slider.oninput = () => show(+slider.value);
  list.onclick = (e) => { const li = e.target.closest("li[data-i]"); if (li) show(+li.dataset.i); };
  q("findings").onclick = (e) => { const b = e.target.closest("button[data-step]"); if (b) show(+b.dataset.step); };
  list.addEventListener("scroll", () => {
    // the reader scrolled (or the list was scrolled to the current row): rows for the new view
    if (scrolling) return;  // the current row's scroll, still to come, wins
    const y = list.scrollTop;
    if (Math.abs(y - scrollY) > 1) { scrollY = y; anchor = rowAt(y); }
    rows();
  });
  // the step list has no size until the explorer is laid out (a widget's output may come later)
  new ResizeObserver(() => {
    const h = list.clientHeight;
    if (h === viewH) return;
    if (!viewH) scrollY = list.scrollTop;
    viewH = h;
    if (cur >= 0 && cur < N) reveal();
  }).observe(list, {box: "border-box"});
  q("fit").onchange = () => placeTree();
  tbox.addEventListener("scroll", () => { tScroll = [tbox.scrollLeft, tbox.scrollTop]; near = null; paintNodes(); });
  new ResizeObserver(() => { if (boxW) measure(); paintNodes(); }).observe(tbox);  // more of the tree may show
  window.addEventListener("resize", () => { measure(); placeTree(); });
  tbox.onclick = (e) => {
    const g = e.target.closest('[id^="node-"]'); if (!g) return;
    const id = +g.id.slice(5); sel = sel === id ? null : id; show(cur);
  };
  q("timeline-box").onclick = (e) => {
    const r = q("timeline-inner").getBoundingClientRect(), f = (e.clientX - r.left) / r.width;
    let best = 0;
    for (let i = 1; i < D.tx.length; i++) if (Math.abs(D.tx[i] - f) < Math.abs(D.tx[best] - f)) best = i;
    show(best);
  };
  host.keys.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || (e.target.tagName === "INPUT" && e.target.type !== "checkbox")) return;
    const to = {ArrowLeft: cur - 1, ArrowRight: cur + 1, Home: 0, End: N - 1}[e.key];
    if (to != null && N) { e.preventDefault(); e.stopPropagation(); show(to); }
  });
  if (host.dark) host.dark((on) => root.classList.toggle("cg-dark", on));
  const view = {
    root,
    go(i, node, quiet) { sel = node; show(i, quiet); },
    grow(h) {
      // new steps, or a fold that rewrote the last ones: their pictures come again when asked for
      S.length = Math.min(S.length, h.start); for (const k in asked) if (+k >= h.start) delete asked[k];
      if (T && !Array.isArray(T.delta)) {
        for (const k in T.keys) if (+k >= h.start) delete T.keys[k];
        for (const k in T.delta) if (+k >= h.start) delete T.delta[k];
        if (tAt >= h.start) tState = null;
      }
      head(h); if (N) show(Math.min(cur < 0 ? N - 1 : cur, N - 1), true); },
    piece(p) {
      merge(p); flying.shift();
      if (cur >= 0 && S[cur] && root.classList.contains("loading")) show(cur, true);
      pump();
    },
    get step() { return cur; },
    get selected() { return sel; },
  };
  merge({at: D.at || {}});
  const start = host.start();
  sel = start.sel;
  show(start.step, true);
  if (host.listen) host.listen(view);
  return view;
}

// The Jupyter widget's host (anywidget): the traits `step` and `selected` follow the view both
// ways; the kernel sends the head at once (`_head`), then pieces of pictures as they are asked for.
function render({ model, el: root }) {
  const D = Object.assign({}, model.get("_head"), model.get("_first"));
  root.tabIndex = 0; root.classList.add("cg-widget");
  // the still picture shown with the widget, for where widgets do not run: not needed here
  const still = model.get("_still");
  if (still) for (const el of document.getElementsByClassName(still)) el.style.display = "none";
  const host = {
    keys: root,
    start: () => ({step: model.get("step"), sel: model.get("selected")}),
    shown(i, node) {
      if (model.get("step") === i && model.get("selected") === node) return;
      model.set("step", i); model.set("selected", node); model.save_changes();
    },
    need(steps) { model.send({type: "steps", steps}); },
    dark(set) {  // marimo's dark theme (JupyterLab's and VS Code's come through their CSS variables)
      const b = document.body, on = () => b.dataset.theme === "dark" || b.classList.contains("dark-theme");
      set(on()); new MutationObserver(() => set(on())).observe(b, {attributes: true, attributeFilter: ["class", "data-theme"]});
    },
  };
  const view = mount(root, D, host);
  const run = root.querySelector(".cg-run"), error = root.querySelector(".cg-error");
  run.hidden = !model.get("_runnable");
  run.onclick = () => { run.disabled = true; model.send({type: "run"}); };
  // a cell (or the kernel) moved the view; the view's own moves come back here too: skip those
  const follow = () => {
    const i = model.get("step"), node = model.get("selected");
    if (i !== view.step || node !== view.selected) view.go(i, node, true);
  };
  model.on("change:step", follow);
  model.on("change:selected", follow);
  model.on("msg:custom", (m) => {
    if (m.type === "piece") view.piece(m.piece);
    else if (m.type === "head") { view.grow(m.head); follow(); }
    else if (m.type === "ran") { run.disabled = false; error.hidden = !m.error; error.textContent = m.error || ""; }
  });
  return () => { model.off("change:step", follow); model.off("change:selected", follow); };
}

export default { render };
