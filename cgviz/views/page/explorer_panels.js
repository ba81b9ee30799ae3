// The explorer's panels that are drawn from their data alone: the findings, the node's outputs and
// the memory pool. explorer.js calls them with what the step shows (the records named by
// explorer_logic.js); the three files are one module (views/html.py, explorer_module).

function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; }
function msg(box, text) { box.textContent = ""; box.appendChild(el("p", "msg", text)); }

// -- the findings ------------------------------------------------------------------------------------
/** cgviz.diagnose's findings (page_data: errors, then warnings, then infos): each title goes to
 * its first evidence step, each step number to that step. Errors and warnings show; infos fold
 * away under them. What the reader opened or closed stays so when the head is resent. */
function drawFindings(box, fs) {
  const was = box.dataset.serious, infos = box.querySelector(".cg-infos");
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
/** The findings' step numbers of step i stand out. */
function markFindings(box, i) { box.querySelectorAll(".f-step").forEach((b) => b.classList.toggle("at", +b.dataset.step === i)); }

// -- the node panel ----------------------------------------------------------------------------------
/** The node `shown` picks (explorer_logic.js, nodeShown) among `nodes`, with its facts, profile
 * and outputs; returns its id, or null where there is none to show. */
function drawNode(box, m, nodes, shown, snap) {
  if (shown.id == null) { msg(box, shown.how); return null; }
  const n = nodes[shown.id]; box.textContent = "";
  box.appendChild(el("div", "how", shown.how));
  box.appendChild(el("div", "title", n.function + " · node " + n.id));
  box.appendChild(el("div", "facts", nodeFacts(n, snap).join(" · ")));
  if (n.signature) box.appendChild(el("div", "facts", "inputs: " + n.signature));
  drawProfile(box, m.profile[n.id]);
  if (!n.outputs.length) { box.appendChild(el("p", "msg", "No outputs.")); return n.id; }
  const t = el("table"), h = el("tr"), alias = n.outputs.some((o) => o.alias_of);
  const cols = ["state", "#", "shape", "dtype", "size", "address"].concat(alias ? ["alias of"] : []);
  cols.forEach((c) => h.appendChild(el("th", null, c)));
  t.appendChild(h);
  n.outputs.forEach((o) => {
    const tr = el("tr");
    tr.appendChild(el("td", "st-" + o.state, ({live: "● ", dead: "○ ", invalid: "✕ "}[o.state] || "") + o.state));
    [o.index, o.shape, o.dtype, o.size].forEach((v) => tr.appendChild(el("td", null, v)));
    tr.appendChild(el("td", "addr", o.address)); if (alias) tr.appendChild(el("td", null, o.alias_of));
    t.appendChild(tr);
    if (o.values) {  // the values kept with Tree(values=True): a line of their own under the row
      const vr = el("tr", "vals"), td = el("td", null, "values " + o.values); td.colSpan = cols.length; vr.appendChild(td); t.appendChild(vr);
    }
  });
  const wrap = el("div", "table-wrap"); wrap.appendChild(t); box.appendChild(wrap);
  return n.id;
}
/** What the node costs and holds (Tree(profile=True)): its times, and its graph's kernels by name. */
function drawProfile(box, p) {
  if (!p) return;
  if (p.time) box.appendChild(el("div", "facts cg-time", "time: " + p.time));
  if (!p.kernels.length) return;
  const total = p.kernels.reduce((a, k) => a + k.count, 0), d = el("details", "cg-kernels");
  d.appendChild(el("summary", null, total + " graph node" + (total === 1 ? "" : "s") + " (kernels, copies)"));
  const ul = el("ul");
  p.kernels.forEach((k) => { const li = el("li", null, k.count + "× " + k.label); li.title = k.name; ul.appendChild(li); });
  d.appendChild(ul); box.appendChild(d);
}

// -- the pool ------------------------------------------------------------------------------------------
// Laid out from records (views/pool_data.py): a row per segment, kept per segment, so a step that
// changes one segment rebuilds one row. `shown` keeps the legend drawn ({legend}); `width()`: the
// panel's width in px, measured when first needed.
function drawPool(pbox, m, t, shown, width) {
  const pool = m.pools[t];
  let box = pbox.querySelector(".cg-pool");
  if (!box) {
    pbox.textContent = ""; box = el("div", "cg-pool");
    box.innerHTML = '<div class="cg-pool-title"></div><div class="cg-pool-sub"></div><div class="cg-pool-body">' +
      '<div class="cg-pool-rows"></div><ul class="cg-pool-legend"></ul></div><p class="cg-pool-foot"></p>';
    pbox.appendChild(box); shown.legend = -1;
  }
  box.querySelector(".cg-pool-title").textContent = pool.title;
  box.querySelector(".cg-pool-sub").textContent = pool.subtitle;
  box.querySelector(".cg-pool-foot").textContent = pool.widened ? m.widened : "";
  box.classList.toggle("compact", pool.segs.length > 24);
  const rows = box.querySelector(".cg-pool-rows"), blockAt = layout(m.fields.block);
  while (rows.children.length > pool.segs.length) rows.lastChild.remove();
  pool.segs.forEach((s, k) => segRow(rows.children[k] || rows.appendChild(newSegRow()), m, s, blockAt, width));
  if (pool.legend === shown.legend) return;
  shown.legend = pool.legend;
  const ul = box.querySelector(".cg-pool-legend"); ul.textContent = "";
  m.legends[pool.legend].forEach((entry) => {
    const ps = m.pstyles[entry.style], li = el("li", "c-" + ps.category);
    const sw = el("span", "sw"); if (ps.color) sw.style.setProperty("--c", ps.color); else sw.hidden = true;
    li.appendChild(sw); li.appendChild(el("span", null, entry.text));
    if (entry.node >= 0) li.dataset.node = entry.node;
    ul.appendChild(li);
  });
}
// A step mostly changes blocks' colours, not their places: the rows and blocks shown are
// reused, and a block changed only where its record differs (new elements for a thousand
// blocks made every far jump lay out and paint the whole pool).
function newSegRow() {
  const r = el("div", "cg-seg"); r.appendChild(el("div", "cg-seg-label")); r.appendChild(el("div", "cg-bar")); return r;
}
function segRow(r, m, s, {stride, at}, width) {
  if (r.cgSeg === s) return;
  r.cgSeg = s;
  const seg = m.segs[s], b = seg.blocks, bar = r.lastChild, blocks = bar.children;
  r.firstChild.textContent = seg.label;
  while (blocks.length > b.length / stride) bar.lastChild.remove();
  const px = Math.max(width() - 330, 200) / 10000;  // the bar's width, roughly, per unit
  for (let k = 0; k < b.length; k += stride) {
    const blk = blocks[k / stride] || bar.appendChild(el("div")), rec = b.slice(k, k + stride).join();
    if (blk.cgRec === rec) continue;
    blk.cgRec = rec;
    const ps = m.pstyles[b[k + at.style]], left = b[k + at.x] / 100 + "%", w = b[k + at.width] / 100 + "%";
    blk.className = "cg-blk c-" + ps.category;
    if (blk.style.left !== left) blk.style.left = left;
    if (blk.style.width !== w) blk.style.width = w;
    blk.style.setProperty("--c", ps.color); blk.style.setProperty("--t", ps.tone);
    if (b[k + at.node] >= 0) blk.dataset.node = b[k + at.node]; else delete blk.dataset.node;
    blk.title = m.ptexts[b[k + at.tip]];
    const fits = blockLabel(m.ptexts[b[k + at.labels]], b[k + at.width] * px);
    if (fits) { if (!blk.firstChild) blk.appendChild(el("span")); blk.firstChild.textContent = fits; } else if (blk.firstChild) blk.textContent = "";
  }
}
/** The blocks and legend entries of node `id` stand out (none: none do). */
function poolMark(pbox, id) {
  pbox.querySelectorAll(".on").forEach((g) => g.classList.remove("on"));
  const mine = id == null ? [] : pbox.querySelectorAll('[data-node="' + id + '"]');
  mine.forEach((g) => g.classList.add("on"));
  pbox.classList.toggle("hl", mine.length > 0);
}
