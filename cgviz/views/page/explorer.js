// The cgviz explorer: one front end with two hosts. The HTML export mounts it on its page with
// the whole payload (`mount`); the Jupyter widget (an anywidget: `render`) gets the payload in
// pieces from the kernel. The payload is built by cgviz/views/page_data.py and decoded, named and
// planned for by explorer_logic.js (loaded before this file, in the same module); this file draws.
// Every lookup is scoped to the explorer's root element, so several explorers can share a document.

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
  '<div class="cg-timeline-box" title="click to go to a step" hidden><div class="cg-tl-names" aria-hidden="true" hidden></div><div class="cg-timeline-inner"><div class="cg-timeline"></div><div class="cg-marker"></div></div></div>' +
  '<div class="cg-now"><div class="cg-headline"></div><div class="cg-reason"></div></div>' +
  '<div class="cg-banner" hidden></div><div class="cg-error" hidden></div>' +
  '<div class="cg-main">' +
  '<section class="panel cg-steps-panel"><h2>Steps <span class="sub cg-count"></span></h2><ol class="cg-steps"><li class="gap" aria-hidden="true"></li><li class="gap" aria-hidden="true"></li></ol></section>' +
  '<section class="panel cg-tree-panel"><h2>Tree after this step <label class="fit" title="shrink the tree to the panel\'s width"><input type="checkbox" class="cg-fit"> fit to width</label></h2><div class="cg-snapinfo"></div><div class="cg-tree-box"></div></section>' +
  '<section class="panel cg-node-panel"><h2>Node outputs</h2><div class="cg-node"></div></section>' +
  '<section class="panel cg-pool-panel"><h2>Memory pool <span class="sub">blocks of the node shown stand out</span></h2><div class="cg-pool-box"></div></section>' +
  '<section class="panel cg-graphs-panel" hidden><div class="cg-graphs"></div></section>' +
  "</div>";
const ALL_SHOWN = 400;

function copyOf(m) { const o = {}; for (const k in m) o[k] = m[k]; return o; }
function natural(svg, side) { const w = svg.getAttribute(side) || "", v = parseFloat(w); return /pt$/.test(w) ? v * 4 / 3 : v; }
function naturalWidth(svg) { return natural(svg, "width"); }
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
    listen(api) { window.addEventListener("hashchange", () => { const s = this.start(); api.go(s.step, s.sel, true); }); },
  };
}

export function mount(root, payload, host) {
  host = host || pageHost();
  root.classList.add("cgviz"); root.innerHTML = SKELETON;
  const q = (name) => root.querySelector(".cg-" + name);
  const slider = q("slider"), tbox = q("tree-box"), pbox = q("pool-box"), list = q("steps"), [gapTop, gapEnd] = list.children;
  // the payload decoded so far, and the pictures asked for (explorer_logic.js)
  const model = newModel(payload.fields), asks = newAsks();
  // the view: the step and node shown, the step list's scroll (and the row it is anchored to once
  // the reader scrolls), the tree box's scroll, and the sizes last measured
  const view = {step: -1, sel: null, scrollY: 0, viewH: 0, anchor: -1, scrolling: false, treeScroll: [0, 0], boxW: 0,
    boxLimits: [0, Infinity], poolW: 0};
  // what the document shows, kept so that a step changes only what differs: the step list's rows
  // built ([lo, hi), measured heights, their estimate, tops), the tree (its drawing, or its structure,
  // groups and node states painted), the pool and its legend
  const cache = {rows: new Map(), lo: 0, hi: 0, rowH: [], est: 0, tops: null,
    tree: -2, lines: null, struct: -1, painted: {}, memo: {state: null, at: -1}, parts: {}, partIds: [], edgeLayer: null,
    hot: [], must: {}, focus: [], near: null, pool: -2, legend: -1, snapNodes: {}};
  // the timeline's box as last measured: whether the timeline is wider than it (a narrow window),
  // the timeline's left and width in it, the box's width and its scroll (read then, not on a step)
  const tl = {over: false, left: 0, w: 0, box: 0, x: 0, lanesAt: 0};

  // -- the head: header, notices, step list, timeline ----------------------------------------------
  const style = el("style"); root.appendChild(style);
  function head(raw) {
    const h = decodeHead(raw), hd = q("header"); hd.textContent = "";
    hd.appendChild(el("h1", null, h.title));
    const meta = el("div", "meta");
    (h.header.meta.length ? h.header.meta : [{key: "meta", text: "none recorded"}]).forEach(({key, text}) => {
      const it = el("span", "meta-item"); it.appendChild(el("span", "meta-key", key)); it.appendChild(document.createTextNode(" " + text)); meta.appendChild(it);
    });
    hd.appendChild(meta);
    const counts = el("div", "counts", h.header.count + (h.header.kinds.length ? " — " : ""));
    h.header.kinds.forEach(({kind, count}, j) => { if (j) counts.appendChild(document.createTextNode(" · ")); counts.appendChild(el("span", "k-" + kind + " kc", count + " " + kind)); });
    hd.appendChild(counts);
    const nb = q("notices"); nb.textContent = "";
    h.notices.forEach((t) => nb.appendChild(el("p", "notice", t)));
    const digits = String(h.n).length + 1;
    style.textContent = ".cgviz{" + (h.css || "") + "}" + Object.keys(h.colors).map((k) => ".cgviz .k-" + k + "{--k:var(--k-" + k + "," + h.colors[k] + ")}").join("") +
      ".cgviz .cg-steps .sn{min-width:" + digits + "ch}.cgviz .cg-steps .why{padding-left:" + digits + "ch}";
    root.classList.toggle("no-pictures", !!h.empty);
    applyHead(model, h);
    forget(h.start);
    const n = model.n;
    q("count").textContent = n;
    if (h.timeline) {
      q("timeline").innerHTML = h.timeline;
      const svg = q("timeline").querySelector("svg");  // shown near its drawn width (page.css)
      if (svg) q("timeline-inner").style.setProperty("--tl-w", naturalWidth(svg) + "px");
    }
    if (h.tband && h.tband.length) {  // the marker spans the steps' band, not the title above it
      q("marker").style.top = (h.tband[0] * 100) + "%";
      q("marker").style.bottom = (h.tband[1] * 100) + "%";
    }
    q("timeline-box").hidden = !h.timeline;
    // the lanes' names, kept at the box's left edge once the timeline's own have scrolled out of it
    const names = q("tl-names"), lanes = (h.tnames && h.tnames.lanes) || [];
    names.textContent = ""; tl.lanesAt = (h.tnames && h.tnames.left) || 0;
    lanes.forEach(([y, text]) => { const s = el("span", null, text); s.style.top = "calc(var(--tl-h) * " + y + ")"; names.appendChild(s); });
    placeNames();
    slider.max = Math.max(n - 1, 0);
    [q("first"), q("prev"), q("next"), q("last"), slider].forEach((b) => { b.disabled = !n; });
    q("keys").textContent = "← → Home End" + (h.empty ? "" : " · click a node");
    q("pos").textContent = n + " steps";
    if (!n) { q("headline").textContent = h.empty; msg(tbox, h.empty); }
    msg(q("node"), n ? "Click a node in the tree to see its outputs." : "");
    drawFindings(q("findings"), h.findings || []); markFindings(q("findings"), view.step);
    // the CUDA graphs made outside the trees (views/graph_list.py: escaped HTML, no script)
    q("graphs").innerHTML = h.graphs || ""; q("graphs-panel").hidden = !h.graphs;
    root.classList.toggle("has-graphs", !!h.graphs);
  }
  function markGraph(g) {
    // the entries of the step's graph in the list of CUDA graphs (data-graphs: their graphs' ids)
    const box = q("graphs");
    box.querySelectorAll(".cg-gl-cur").forEach((e) => e.classList.remove("cg-gl-cur"));
    if (g != null) box.querySelectorAll('[data-graphs~="' + g + '"]').forEach((e) => e.classList.add("cg-gl-cur"));
  }
  // -- the step list -------------------------------------------------------------------------------
  // Only the rows in and around the list's view are in the document (10,000 rows made every step's
  // style, layout and paint cost); two gaps, before and after them, stand for the others
  // (rowTops, rowsWanted in explorer_logic.js).
  function row(i) {
    const r = model.rows[i], li = el("li", "k-" + r.kind + (i === view.step ? " cur" : ""));
    li.dataset.i = i;
    li.appendChild(el("span", "sn", i + 1)); li.appendChild(el("span", "hl", r.headline));
    if (r.note) li.appendChild(el("span", "blk", r.note));
    li.appendChild(el("span", "why", r.reason));
    if (r.times > 1) li.dataset.fold = r.times;
    measured.observe(li);
    return li;
  }
  function tops() {
    if (!cache.tops) cache.tops = rowTops(model.n, cache.rowH, cache.est);
    return cache.tops;
  }
  function rows() {
    // the rows around the list's view (of the current row while the list has no size)
    const p = tops(), y = view.viewH ? view.scrollY : p[Math.max(view.step, 0)];
    const want = rowsWanted(p, model.n, cache.lo, cache.hi, y, view.viewH);
    if (!want) return;
    const [a, b] = want, made = cache.rows;
    made.forEach((li, i) => { if (i < a || i >= b) drop(li, i); });
    const front = document.createDocumentFragment(), back = document.createDocumentFragment();
    for (let i = a; i < b; i++) if (!made.has(i)) { const li = row(i); made.set(i, li); (i < cache.lo ? front : back).appendChild(li); }
    gapTop.after(front); gapEnd.before(back);
    cache.lo = a; cache.hi = b; pad();
  }
  function drop(li, i) { li.remove(); measured.unobserve(li); cache.rows.delete(i); }
  function pad() { const p = tops(); gapTop.style.height = p[cache.lo] + "px"; gapEnd.style.height = p[model.n] - p[cache.hi] + "px"; }
  function forget(from) {
    // rows from `from` on are new or were rewritten (a fold): built and measured again
    cache.rows.forEach((li, i) => { if (i >= from) drop(li, i); });
    cache.hi = Math.min(cache.hi, from); cache.lo = Math.min(cache.lo, cache.hi);
    cache.rowH.length = Math.min(cache.rowH.length, from); cache.tops = null;
  }
  function reveal() {
    // scroll the step list (only it) so that the current row shows, a third of the way down; the
    // rows now, the scroll at the next frame (set now, it would make the browser lay out the page
    // before the step's other changes, and again after them)
    const y = inView(view.scrollY);
    view.anchor = -1;
    if (y !== view.scrollY) {
      if (!view.scrolling) requestAnimationFrame(() => { view.scrolling = false; list.scrollTop = view.scrollY; });
      view.scrollY = y; view.scrolling = true;
    }
    rows();
  }
  function inView(y) { return scrollShowing(tops(), model.n, view.step, y, view.viewH); }
  // rows laid out: their heights replace the estimate, and the list scrolls by what that moved the
  // anchor (the first row shown once the reader scrolls; until then the current row, kept in view)
  const measured = new ResizeObserver((es) => {
    const k = view.anchor < 0 ? view.step : view.anchor, at = tops()[k];
    let sum = 0, n = 0;
    es.forEach((e) => {
      const i = +e.target.dataset.i, h = e.borderBoxSize[0].blockSize;
      if (h && i < model.n && cache.rowH[i] !== h) { cache.rowH[i] = h; sum += h; n++; }
    });
    if (!n) return;
    if (!cache.est) cache.est = sum / n;  // the first rows measured stand for the others
    cache.tops = null;
    pad();
    const y = view.scrollY + tops()[k] - at, to = view.anchor < 0 ? inView(y) : y;
    if (to !== view.scrollY && view.viewH) list.scrollTop = view.scrollY = to;
  });
  function merge(raw) {
    // a piece of pictures (a widget's trees come as drawings plus node states): the steps it filled
    return mergePiece(model, decodePiece(model.fields, raw));
  }

  // -- the tree ------------------------------------------------------------------------------------
  function setTree(t) {
    // a tree that differs from the one shown only in whole node or edge groups: swap just those
    // (a big tree's layout is what costs; the browser then lays out only what changed)
    const svg = tbox.querySelector("svg"), next = lineIndex(model.trees[t]), swaps = svg ? groupSwaps(model.lines, cache.lines, next) : null;
    if (swaps) {
      const tmp = document.createElementNS(svg.namespaceURI, "g");
      tmp.innerHTML = swaps.map((m) => m[1]).join("");
      while (tmp.firstElementChild) {
        const g = tmp.firstElementChild, old = byId(svg, g.id);
        if (old) old.parentNode.replaceChild(g, old); else tmp.removeChild(g);
      }
    } else if (svg) {
      const fresh = el("div"); fresh.innerHTML = next.map((j) => model.lines[j]).join("\n");
      morph(svg, fresh.firstElementChild);
    } else tbox.innerHTML = next.map((j) => model.lines[j]).join("\n");
    cache.lines = next;
  }
  function paintNode(g, v, was) {
    // a new replay count alone rewrites one text; a new look redraws the box
    const look = model.tree.looks[v.look];
    if (was.look === v.look) { g.getElementsByTagName("text")[look.count_at].textContent = lookCountText(look, v.replays); return; }
    g.setAttribute("class", look.cls + (view.sel != null && g.id === "node-" + view.sel ? " cg-sel" : "")); g.setAttribute("fill", look.fill);
    g.innerHTML = lookMarkup(look, v.replays, g.dataset.w, g.dataset.cx);
  }
  function setTreeState(i, rec, snap) {
    // the structure's drawing once; then the step's state, painted where it shows (paintNodes)
    if (rec.tree !== cache.struct) {
      const s = model.tree.structs[rec.tree];
      drawStructure(lineIndex(model.trees[s.tree]).map((j) => model.lines[j])); cache.struct = rec.tree; cache.hot = []; cache.near = null;
      cache.painted = s.state ? treeStateOf(s.state, model.fields) : copyOf(treeStateAt(model.tree, model.fields, s.first, cache.memo));
    }
    treeStateAt(model.tree, model.fields, i, cache.memo);
    // the nodes this step names, and those the step before named, are painted wherever they are
    const now = {};
    [rec.node, snap.cur, view.sel].forEach((id) => { if (id != null) now[id] = 1; });
    const both = copyOf(cache.must); for (const id in now) both[id] = 1;
    cache.must = now; markPath(snap.path);
    return both;
  }
  function paintNodes(also) {
    // repaint the nodes whose look or replay count differ from the step's: those in view or near it
    // (a quarter of a view around), and `also`; the others when scrolled to (a jump then costs what
    // shows)
    if (!model.tree || cache.struct < 0) return;
    const sight = inSight(), state = cache.memo.state;
    place(sight);
    for (const id in state) {
      const a = cache.painted[id], v = state[id];
      if (a.look === v.look && a.replays === v.replays) continue;
      if (!(also && also[id]) && !meets(cache.parts["node-" + id].box, sight)) continue;
      paintNode(part("node-" + id), v, a); cache.painted[id] = v;
    }
  }
  function inSight() {
    // the drawing's part in the tree box's view and a quarter of a view around it, from the box's
    // size and scroll as last seen (reading them after a step's changes would make the browser
    // lay out the page there and then)
    if (!cache.near) { const sc = scale(); cache.near = sightAt(view.treeScroll, sc, view.boxW + 12, boxHeight(sc[0])); }
    return cache.near;
  }
  function scale() {
    // the drawing's scale in the box, and its left and top in the box's scrolled content: 6 px
    // of padding in, centred when narrower than the box (page.css)
    const svg = tbox.querySelector("svg"), nat = naturalWidth(svg), f = tbox.classList.contains("fit") ? Math.min(1, view.boxW / nat) : 1;
    return [f, 6 + Math.max(0, (view.boxW - nat * f) / 2), 6];
  }

  // -- the tree's groups: a big tree keeps in the document only those in sight ---------------------
  // Laying out and painting a thousand node groups was most of a far jump's frame, so a tree of
  // more than ALL_SHOWN groups has in the document only the node and edge groups in or near the
  // box's view; the others stay lines of text until scrolled to. A smaller tree is all there (find
  // in page sees every node). A group once built is kept, with what was painted on it.
  function drawStructure(lines) {
    // the drawing without its groups (its frame: size, legend, the edges' layer); the groups' boxes
    const d = drawingParts(lines);
    cache.parts = d.parts; cache.partIds = d.ids;
    tbox.innerHTML = d.frame.join("\n");
    cache.edgeLayer = tbox.querySelector(".cgviz-edges");
  }
  function place(sight) {
    // the groups in sight into the document, those out of it out (all of them for a small tree)
    const svg = tbox.querySelector("svg"), add = [], culled = cache.partIds.length > ALL_SHOWN;
    cache.partIds.forEach((id) => {
      const p = cache.parts[id], want = !culled || meets(p.box, sight);
      if (want && !p.on) add.push(id);
      else if (!want && p.on) { p.el.remove(); p.on = false; }
    });
    build(add);
    add.forEach((id) => {
      const p = cache.parts[id], e = p.el; p.on = true;
      if (p.node) { e.classList.toggle("cg-sel", id === "node-" + view.sel); svg.appendChild(e); }
      else if (e.classList.contains("on-path")) cache.edgeLayer.appendChild(e);  // the path's edges drawn last
      else cache.edgeLayer.insertBefore(e, cache.edgeLayer.firstChild);
    });
  }
  function build(ids) {
    // the groups of these ids as elements, from their lines (parsed together)
    const todo = ids.filter((id) => !cache.parts[id].el);
    if (!todo.length) return;
    const tmp = document.createElementNS(tbox.querySelector("svg").namespaceURI, "g");
    tmp.innerHTML = todo.map((id) => cache.parts[id].line).join("");
    Array.from(tmp.children).forEach((e) => { cache.parts[e.id].el = e; });
  }
  function part(id) { const p = cache.parts[id]; if (!p) return null; build([id]); return p.el; }
  function markPath(path) {
    // the edges of the current path take their path stroke, drawn last (over their siblings' elbows)
    cache.hot.forEach((e) => e.classList.remove("on-path"));
    cache.hot = [];
    for (let j = 0; j + 1 < path.length; j++) {
      const e = part("edge-" + path[j] + "-" + path[j + 1]);
      if (e) { e.classList.add("on-path"); if (e.parentNode) e.parentNode.appendChild(e); cache.hot.push(e); }
    }
  }
  function markSelected() {
    tbox.querySelectorAll(".cg-sel").forEach((g) => g.classList.remove("cg-sel"));
    if (view.sel == null) return;
    const g = cache.struct >= 0 ? part("node-" + view.sel) : byId(tbox, "node-" + view.sel);
    if (g) g.classList.add("cg-sel");
  }
  function measure() {
    const cs = getComputedStyle(tbox);
    view.boxW = tbox.clientWidth - 12; view.boxLimits = [parseFloat(cs.minHeight) || 0, parseFloat(cs.maxHeight) || Infinity];
    view.poolW = pbox.clientWidth; cache.near = null;
  }
  function boxHeight(f) {
    // the tree box's height as the drawing makes it (its min- and max-height around the drawing and
    // the padding), less a scrollbar when the drawing is wider (fit: as wide, to a rounding): known
    // before the browser lays it out
    const svg = tbox.querySelector("svg"), wide = naturalWidth(svg) * f > view.boxW + 0.5;
    return Math.min(view.boxLimits[1], Math.max(view.boxLimits[0], natural(svg, "height") * f + 12 + (wide ? 15 : 0))) - (wide ? 15 : 0);
  }
  function placeTree(also) {
    // shrink a tree a little too wide for the panel; otherwise keep its size. A drawing bigger than
    // the box's view, wider or taller (a tree fit to the width can still be taller than the box),
    // scrolls to the node of interest (a big tree's groups are placed where the scroll will be,
    // before it is set); one that shows whole keeps the box as it is
    const svg = tbox.querySelector("svg"); if (!svg) return;
    if (!view.boxW) measure();
    const nat = naturalWidth(svg), fit = q("fit").checked || (nat > view.boxW && view.boxW / nat >= 0.6);
    if (tbox.classList.contains("fit") !== fit) { tbox.classList.toggle("fit", fit); cache.near = null; }
    const f = scale()[0], over = nat * f > view.boxW + 0.5 || natural(svg, "height") * f + 12 > boxHeight(f) + 0.5;
    if (cache.struct < 0) { if (over) requestAnimationFrame(scrollToNode); return; }
    const to = reach(over ? aim() : view.treeScroll);
    if (to[0] !== view.treeScroll[0] || to[1] !== view.treeScroll[1]) { view.treeScroll = to; cache.near = null; requestAnimationFrame(() => scrollTree(to)); }
    paintNodes(also);
  }
  function aim() {
    // the box's scroll that shows the node of interest (the one selected, else the step's, else the
    // current one): as it is if the node shows, else with the node in the middle
    const id = cache.focus.find((k) => k != null && cache.parts["node-" + k]);
    if (id == null) return view.treeScroll;
    const sc = scale();
    return scrollShowingBox(cache.parts["node-" + id].box, view.treeScroll, sc, view.boxW + 12, boxHeight(sc[0]));
  }
  function reach([x, y]) {
    // a scroll no further than the box goes with this drawing ([0, 0] where it shows whole): the
    // browser stops there, but a frame later, and the groups in sight are placed now, for where the
    // scroll will be (a drawing smaller than the last would keep its scroll, its top unpainted)
    const svg = tbox.querySelector("svg"), f = scale()[0], h = boxHeight(f);
    return [Math.min(x, Math.max(0, Math.ceil(naturalWidth(svg) * f - view.boxW))), Math.min(y, Math.max(0, Math.ceil(natural(svg, "height") * f + 12 - h)))];
  }
  function scrollTree([x, y]) {
    // at the next frame (set mid-step, the scroll would make the browser lay out the page then);
    // the box may not scroll that far: then the groups in sight are placed for where it stopped
    tbox.scrollLeft = x; tbox.scrollTop = y;
    const at = [tbox.scrollLeft, tbox.scrollTop];
    if (at[0] !== x || at[1] !== y) { view.treeScroll = at; cache.near = null; paintNodes(); }
  }
  function scrollToNode() {
    // a picture drawn whole (no tree states): its node of interest (as aim's) into the box's view,
    // its scrollbars left out. Found by id, not by state: in a picture of several ranks' or
    // devices' trees only the step's own has ids unprefixed (rank_trees.py), and where it has no
    // current node another tree's current one is not this step's
    let g = null; cache.focus.some((k) => k != null && (g = byId(tbox, "node-" + k)));
    if (!g) return;
    const b = tbox.getBoundingClientRect(), r = g.getBoundingClientRect(), x = b.left + tbox.clientLeft, y = b.top + tbox.clientTop;
    const w = tbox.clientWidth, h = tbox.clientHeight;
    if (r.left < x || r.right > x + w) tbox.scrollLeft += (r.left + r.right - w) / 2 - x;
    if (r.top < y || r.bottom > y + h) tbox.scrollTop += (r.top + r.bottom - h) / 2 - y;
  }
  function drawnAfter(g) {
    // the step that another rank's or device's tree in the picture is drawn after (rank_trees.py)
    const t = g.closest("svg[data-step]"), k = t ? parseInt(t.getAttribute("data-step"), 10) : NaN;
    return k >= 0 && k < model.n ? k : null;
  }

  function poolWidth() { if (!view.poolW) measure(); return view.poolW; }
  function placeNames() {
    // shown where the timeline scrolled past the start of its lanes (from what was last measured:
    // a step's scroll reads no layout); each name sits at its lane's height (--tl-h, page.css)
    const names = q("tl-names");
    names.hidden = !names.firstChild || !tl.over || tl.x <= tl.left + tl.lanesAt * tl.w;
  }
  function followOnTimeline() {
    // a timeline wider than its box scrolls to keep the current step in sight
    const x = tl.left + model.tx[view.step] * tl.w, m = Math.min(24, tl.box / 4);
    if (x < tl.x + m || x > tl.x + tl.box - m) q("timeline-box").scrollLeft = tl.x = Math.max(0, x - tl.box / 2);
  }
  function nodeTable(rec, snap) {
    // the selected node's outputs, or the step's node, or the current one; returns the node shown
    const box = q("node");
    if (!snap) { msg(box, "No snapshot for this step."); return null; }
    const nodes = cache.snapNodes[rec.snap] || (cache.snapNodes[rec.snap] = nodesOfSnap(model, snap));
    return drawNode(box, model, nodes, nodeShown(nodes, snap, view.sel, rec.node), snap);
  }

  // -- a step --------------------------------------------------------------------------------------
  function ask(i) {
    // the pictures of the steps around i that have not arrived (a widget's host asks the kernel;
    // planAsks in explorer_logic.js says which, and when)
    planAsks(asks, i, model.n, (k) => !!model.steps[k], Date.now()).forEach((steps) => host.need(steps));
  }
  function pump() { const next = nextAsk(asks, Date.now()); if (next) host.need(next); }
  function show(i, quiet) {
    if (!model.n) return;
    const s = stepAt(model, i), rec = s.rec, r = s.row;
    i = s.i;
    if (cache.rows.has(view.step)) cache.rows.get(view.step).classList.remove("cur");
    view.step = i; reveal(); cache.rows.get(i).classList.add("cur");
    markFindings(q("findings"), view.step);
    q("now").className = "cg-now k-" + r.kind;
    const hl = q("headline"), [before, kind, after] = s.headline;
    hl.textContent = "";
    hl.appendChild(el("span", null, before)); hl.appendChild(el("span", "kind", kind));
    if (after) hl.appendChild(el("span", null, after));
    q("reason").textContent = r.reason;
    slider.value = i; q("pos").textContent = "step " + (i + 1) + " / " + model.n;
    q("first").disabled = q("prev").disabled = i === 0; q("last").disabled = q("next").disabled = i === model.n - 1;
    if (model.tx && model.tx.length > i) { q("marker").style.left = (model.tx[i] * 100) + "%"; if (tl.over) followOnTimeline(); }
    markGraph(r.graph);
    ask(i);
    if (!quiet) host.shown(i, view.sel);
    if (!rec) {  // its pictures are on their way (a widget's kernel, a page's later part)
      root.classList.add("loading");
      if (cache.pool === -2) msg(tbox, "Loading the pictures of this step…");  // nothing drawn yet
      return;
    }
    root.classList.remove("loading");
    const b = q("banner");
    if (s.banner) {
      b.textContent = ""; b.appendChild(el("div", null, s.banner.head));
      if (s.banner.items.length) { const ul = el("ul"); s.banner.items.forEach((t) => ul.appendChild(el("li", null, t))); b.appendChild(ul); }
      b.hidden = false;
    } else b.hidden = true;
    let also;
    cache.focus = [view.sel, rec.node, s.snap ? s.snap.cur : null];  // the node of interest: the first drawn (aim, scrollToNode)
    if (s.tree.kind === "none") {
      // no tree: the whole trace's reason, a CUDA graph's step, or no snapshot kept
      if (cache.tree !== s.tree.id) { cache.tree = s.tree.id; cache.struct = -1; cache.lines = null; msg(tbox, s.tree.msg); }
    } else if (s.tree.kind === "states") { cache.tree = -2; also = setTreeState(i, rec, s.snap); }
    else if (rec.tree !== cache.tree) { cache.tree = rec.tree; setTree(rec.tree); }
    markSelected(); placeTree(also);
    if (rec.pool !== cache.pool) { cache.pool = rec.pool; if (rec.pool >= 0) drawPool(pbox, model, rec.pool, cache, poolWidth); else msg(pbox, "No snapshot of the pool for this step."); }
    q("snapinfo").textContent = s.snapInfo;
    poolMark(pbox, nodeTable(rec, s.snap));
  }

  // -- wiring --------------------------------------------------------------------------------------
  head(payload);
  q("first").onclick = () => show(0);
  q("prev").onclick = () => show(view.step - 1);
  q("next").onclick = () => show(view.step + 1);
  q("last").onclick = () => show(model.n - 1);
  slider.oninput = () => show(+slider.value);
  list.onclick = (e) => { const li = e.target.closest("li[data-i]"); if (li) show(+li.dataset.i); };
  q("findings").onclick = (e) => { const b = e.target.closest("button[data-step]"); if (b) show(+b.dataset.step); };
  list.addEventListener("scroll", () => {
    // the reader scrolled (or the list was scrolled to the current row): rows for the new view
    if (view.scrolling) return;  // the current row's scroll, still to come, wins
    const y = list.scrollTop;
    if (Math.abs(y - view.scrollY) > 1) { view.scrollY = y; view.anchor = rowAt(tops(), model.n, y); }
    rows();
  });
  // the step list has no size until the explorer is laid out (a widget's output may come later)
  new ResizeObserver(() => {
    const h = list.clientHeight;
    if (h === view.viewH) return;
    if (!view.viewH) view.scrollY = list.scrollTop;
    view.viewH = h;
    if (view.step >= 0 && view.step < model.n) reveal();
  }).observe(list, {box: "border-box"});
  q("fit").onchange = () => placeTree();
  tbox.addEventListener("scroll", () => { view.treeScroll = [tbox.scrollLeft, tbox.scrollTop]; cache.near = null; paintNodes(); });
  new ResizeObserver(() => { if (view.boxW) measure(); paintNodes(); }).observe(tbox);  // more of the tree may show
  const tlObserver = new ResizeObserver(() => {
    const b = q("timeline-box"), inner = q("timeline-inner");
    Object.assign(tl, {over: b.scrollWidth > b.clientWidth + 1, left: inner.offsetLeft, w: inner.offsetWidth, box: b.clientWidth, x: b.scrollLeft});
    q("tl-names").style.setProperty("--tl-h", inner.offsetHeight + "px");
    if (tl.over && model.tx && view.step >= 0 && view.step < model.tx.length) followOnTimeline();
    placeNames();
  });
  tlObserver.observe(q("timeline-box")); tlObserver.observe(q("timeline-inner"));
  q("timeline-box").addEventListener("scroll", () => { tl.x = q("timeline-box").scrollLeft; placeNames(); });
  window.addEventListener("resize", () => { measure(); placeTree(); });
  tbox.onclick = (e) => {
    // a node of the step's tree (node-M) is selected, or let go. One of another rank's or device's
    // tree beside it (rank1-node-M) is selected at the step that tree is drawn after, where it is
    // the step's own: the node panel, the pool and the address all speak of the step's tree
    const g = e.target.closest('[id^="node-"],[id*="-node-"]'), m = g && /^([\w-]+-)?node-(\d+)$/.exec(g.id); if (!m) return;
    const id = +m[2], k = m[1] ? drawnAfter(g) : view.step;
    if (k == null) return;
    view.sel = k === view.step && view.sel === id ? null : id; show(k);
  };
  q("timeline-box").onclick = (e) => {
    if (!e.target.closest(".cg-timeline-inner")) return;  // the box's empty sides, its scrollbar
    const r = q("timeline-inner").getBoundingClientRect(), f = (e.clientX - r.left) / r.width, tx = model.tx;
    let best = 0;
    for (let i = 1; i < tx.length; i++) if (Math.abs(tx[i] - f) < Math.abs(tx[best] - f)) best = i;
    show(best);
  };
  host.keys.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || (e.target.tagName === "INPUT" && e.target.type !== "checkbox")) return;
    const to = {ArrowLeft: view.step - 1, ArrowRight: view.step + 1, Home: 0, End: model.n - 1}[e.key];
    if (to != null && model.n) { e.preventDefault(); e.stopPropagation(); show(to); }
  });
  if (host.dark) host.dark((on) => root.classList.toggle("cg-dark", on));
  const api = {
    root,
    go(i, node, quiet) { view.sel = node; show(i, quiet); },
    grow(h) {
      // new steps, or a fold that rewrote the last ones: their pictures come again when asked for
      growModel(model, h.start); forgetAsks(asks, h.start);
      if (cache.memo.at >= h.start) cache.memo.state = null;
      head(h); if (model.n) show(Math.min(view.step < 0 ? model.n - 1 : view.step, model.n - 1), true);
    },
    piece(p) {
      answered(asks, merge(p));
      if (view.step >= 0 && model.steps[view.step] && root.classList.contains("loading")) show(view.step, true);
      pump();
    },
    get step() { return view.step; },
    get selected() { return view.sel; },
  };
  merge(payload);
  const start = host.start();
  view.sel = start.sel;
  show(start.step, true);
  if (host.listen) host.listen(api);
  return api;
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
