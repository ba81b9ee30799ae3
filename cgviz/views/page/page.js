
(function () {
"use strict";
var D = JSON.parse(document.getElementById("cgviz-data").textContent);
var S = D.steps, N = S.length;
function $(id) { return document.getElementById(id); }
var rows = $("steps").children, slider = $("slider");
var cur = -1, sel = null, shownTree = -2, shownPool = -2, shownNode = null, snapNodes = {};

function lineIndex(r) { var out = []; for (var i = 0; i < r.length; i += 2) for (var j = r[i]; j < r[i] + r[i + 1]; j++) out.push(j); return out; }
var shownLines = null, WHOLE = /^(<g id="((?:node|edge)-[0-9-]+)".*<\/g>)(?:<\/svg>)?$/;
function setTree(t) {
  // a tree that differs from the one shown only in whole node or edge groups: swap just those
  // (a big tree's layout is what costs; the browser then lays out only what changed)
  var box = $("tree-box"), svg = box.querySelector("svg"), next = lineIndex(D.trees[t]), swaps = [], gone = [];
  if (svg && shownLines && shownLines.length === next.length) {
    for (var p = 0; p < next.length; p++) {
      if (next[p] === shownLines[p]) continue;
      var a = WHOLE.exec(D.lines[shownLines[p]]), b = WHOLE.exec(D.lines[next[p]]);
      if (!a || !b || swaps.length > next.length / 2) { swaps = null; break; }
      gone.push(a[2]); swaps.push(b);
    }
    // the same groups, redrawn (edges may change places: those on the path are drawn last)
    if (swaps && gone.sort().join() !== swaps.map(function (m) { return m[2]; }).sort().join()) swaps = null;
  } else swaps = null;
  if (swaps) {
    var tmp = document.createElementNS(svg.namespaceURI, "g");
    tmp.innerHTML = swaps.map(function (m) { return m[1]; }).join("");
    while (tmp.firstElementChild) {
      var g = tmp.firstElementChild, old = document.getElementById(g.id);
      if (old) old.parentNode.replaceChild(g, old); else tmp.removeChild(g);
    }
  } else if (svg) {
    var fresh = document.createElement("div");
    fresh.innerHTML = next.map(function (j) { return D.lines[j]; }).join("\n");
    morph(svg, fresh.firstElementChild);
  } else box.innerHTML = next.map(function (j) { return D.lines[j]; }).join("\n");
  shownLines = next;
}
function morph(a, b) {
  // make the shown element a look like b, replacing only the subtrees that differ
  if (a.isEqualNode(b)) return;
  var ka = a.childNodes, kb = b.childNodes, same = a.nodeName === b.nodeName && ka.length === kb.length &&
    a.attributes && b.attributes && a.attributes.length === b.attributes.length;
  for (var i = 0; same && i < a.attributes.length; i++) same = a.attributes[i].value === b.getAttribute(a.attributes[i].name);
  if (!same || !ka.length) { a.parentNode.replaceChild(b, a); return; }
  var xs = Array.prototype.slice.call(ka), ys = Array.prototype.slice.call(kb);
  for (i = 0; i < xs.length; i++) morph(xs[i], ys[i]);
}
var T = D.tree, tState = null, tAt = -1, shownStruct = -1, shownState = {}, hot = [], geo = {}, must = {};
function stateAt(i) {
  // node id -> [look, replays] after step i: on from the state last computed when that is at most
  // a keyframe's distance before i, else from the keyframe before i (a jump costs at most that)
  if (!tState || tAt > i || i - tAt > T.every) {
    var k = i - i % T.every, f = T.keys[k]; tState = {}; tAt = k;
    for (var j = 0; j < f.length; j += 3) tState[f[j]] = [f[j + 1], f[j + 2]];
  }
  for (var s = tAt + 1; s <= i; s++) {
    var d = T.delta[s];
    for (j = 0; j < d.length; j += 3) { if (d[j + 1] < 0) delete tState[d[j]]; else tState[d[j]] = [d[j + 1], d[j + 2]]; }
  }
  tAt = i; return tState;
}
function copyOf(m) { var o = {}; for (var k in m) o[k] = m[k]; return o; }
function replays(n) { return n + (n === 1 ? " replay" : " replays"); }
function paintNode(g, v, was) {
  // a new replay count alone rewrites one text; a new look redraws the box
  var L = T.looks[v[0]];
  if (was[0] === v[0]) { g.getElementsByTagName("text")[L[3]].textContent = L[4].replace("\ue000", replays(v[1])); return; }
  g.setAttribute("class", L[0] + (sel != null && g.id === "node-" + sel ? " cg-sel" : "")); g.setAttribute("fill", L[1]);
  g.innerHTML = L[2].replace("\ue000", replays(v[1])).split("\ue001").join(g.dataset.w).split("\ue002").join(g.dataset.cx);
}
function setTreeState(i, st) {
  // the structure's drawing once; then the step's state, painted where it shows (paintNodes)
  if (st[0] !== shownStruct) {
    var s = T.structs[st[0]], gs;
    $("tree-box").innerHTML = unrun(D.trees[s[0]]); shownStruct = st[0]; hot = []; geo = {};
    shownState = copyOf(stateAt(s[1]));
    gs = $("tree-box").querySelectorAll('g[id^="node-"]');
    for (var k = 0; k < gs.length; k++) {
      var m = /translate\(([-\d.]+),([-\d.]+)\)/.exec(gs[k].getAttribute("transform"));
      geo[gs[k].id.slice(5)] = [+m[1], +m[2], +gs[k].dataset.w];
    }
  }
  stateAt(i);
  // the nodes this step names, and those the step before named, are painted wherever they are
  var now = {}, sn = D.snaps[st[2]];
  [st[3], sn.cur, sel].forEach(function (id) { if (id != null) now[id] = 1; });
  var both = copyOf(must); for (var id in now) both[id] = 1;
  must = now; markPath(sn.path);
  return both;
}
function paintNodes(also) {
  // repaint the nodes whose look or replay count differ from the step's: those in view or near it
  // (half a box around), and `also`; the others when scrolled to (a jump then costs what shows)
  if (!T || shownStruct < 0) return;
  var box = $("tree-box"), svg = box.querySelector("svg"), b = box.getBoundingClientRect(), r = svg.getBoundingClientRect();
  var f = naturalWidth(svg) / r.width || 1, x0 = (b.left - b.width / 2 - r.left) * f, x1 = (b.right + b.width / 2 - r.left) * f;
  var y0 = (b.top - b.height / 2 - r.top) * f - 400, y1 = (b.bottom + b.height / 2 - r.top) * f;
  for (var id in tState) {
    var a = shownState[id], v = tState[id], p = geo[id];
    if (a[0] === v[0] && a[1] === v[1]) continue;
    if (!(also && also[id]) && (p[0] > x1 || p[0] + p[2] < x0 || p[1] > y1 || p[1] < y0)) continue;
    paintNode(document.getElementById("node-" + id), v, a); shownState[id] = v;
  }
}
function markPath(path) {
  // the edges of the current path take their path stroke, drawn last (over their siblings' elbows)
  for (var j = 0; j < hot.length; j++) hot[j].classList.remove("on-path");
  hot = [];
  for (j = 0; j + 1 < path.length; j++) {
    var e = document.getElementById("edge-" + path[j] + "-" + path[j + 1]);
    if (e) { e.classList.add("on-path"); e.parentNode.appendChild(e); hot.push(e); }
  }
}
var poolShown = null, TEXT_LINE = /^\s*(<text\b[^>]*>)([^<]*)<\/text>\s*$/;
function setPool(t) {
  var box = $("pool-box"), tmp = document.createElement("div"), old = box.firstElementChild, next = poolLines(t);
  var svg = old && old.tagName.toLowerCase() === "svg";
  if (!(svg && poolShown && patchTexts(old, poolShown, next))) {
    tmp.innerHTML = next.map(function (j) { return D.lines[j]; }).join("\n");
    if (svg) morph(old, tmp.firstElementChild);
    else { box.textContent = ""; box.appendChild(tmp.firstElementChild); }
  }
  poolShown = next;
}
var poolMemo = {}, poolMemoSize = 0;
function poolLines(t) {
  // a pool's line indices: from its runs, or from the pool before it and a diff (see _Kind)
  var r = D.pools[t];
  if (Array.isArray(r)) return lineIndex(r);
  if (poolMemo[t]) return poolMemo[t];
  var base = poolLines(r.b), o = r.o, out = [];
  for (var k = 0; k < o.length; k++) {
    if (o[k] < 0) out.push(-1 - o[k]);
    else { for (var j = o[k]; j < o[k] + o[k + 1]; j++) out.push(base[j]); k++; }
  }
  if (++poolMemoSize > 64) { poolMemo = {}; poolMemoSize = 0; }
  return (poolMemo[t] = out);
}
function patchTexts(svg, a, b) {
  // pools that differ only in a few texts (the totals in the title, in a replay loop): rewrite
  // those texts rather than parse and compare the whole drawing
  if (a.length !== b.length) return false;
  var edits = [], n = 0, tmp = document.createElement("div");
  for (var p = 0; p < b.length; p++) {
    var line = D.lines[a[p]];
    if (a[p] !== b[p]) {
      var x = TEXT_LINE.exec(line), y = TEXT_LINE.exec(D.lines[b[p]]);
      if (!x || !y || x[1] !== y[1] || edits.length > 8) return false;
      edits.push([n, y[2]]);
    }
    if (line.indexOf("<text") >= 0) n += line.split(/<text\b/).length - 1;
  }
  var texts = svg.getElementsByTagName("text");
  for (p = 0; p < edits.length; p++) { tmp.innerHTML = edits[p][1]; texts[edits[p][0]].textContent = tmp.textContent; }
  return true;
}
function unrun(r) { var out = []; for (var i = 0; i < r.length; i += 2) for (var j = r[i]; j < r[i] + r[i + 1]; j++) out.push(D.lines[j]); return out.join("\n"); }
function el(tag, cls, text) { var e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; }
function msg(box, text) { box.textContent = ""; box.appendChild(el("p", "msg", text)); }
function nodesOf(si) {
  if (!snapNodes[si]) { var m = {}, r = D.snaps[si].n; for (var i = 0; i < r.length; i += 2) for (var j = r[i]; j < r[i] + r[i + 1]; j++) m[D.nodes[j][0]] = D.nodes[j]; snapNodes[si] = m; }
  return snapNodes[si];
}
function poolMark(id) {
  var box = $("pool-box"), on = box.querySelectorAll(".on");
  for (var i = 0; i < on.length; i++) on[i].classList.remove("on");
  var mine = id == null ? [] : box.querySelectorAll('[data-node="' + id + '"]');
  for (i = 0; i < mine.length; i++) mine[i].classList.add("on");
  box.classList.toggle("hl", mine.length > 0);
}
function nodeTable(st) {
  shownNode = null; nodeTableInner(st); return shownNode;
}
function nodeTableInner(st) {
  var box = $("node"), si = st[2];
  if (si < 0) { msg(box, "No snapshot for this step."); return; }
  var snap = D.snaps[si], nodes = nodesOf(si), id = sel, how = "selected · click it again to follow the steps";
  if (id == null || !nodes[id]) {
    if (id != null) how = "node " + id + " does not exist at this step; showing ";
    else how = "";
    id = st[3] != null && nodes[st[3]] ? st[3] : snap.cur;
    how += id == null ? "" : (id === st[3] ? "the node of this step" : "the current node") + " · click a node to pin it";
  }
  if (id == null || !nodes[id]) { msg(box, Object.keys(nodes).length ? "Click a node in the tree to see its outputs." : "No nodes yet."); return; }
  var n = nodes[id]; box.textContent = ""; shownNode = id;
  box.appendChild(el("div", "how", how));
  box.appendChild(el("div", "title", n[1] + " · node " + n[0]));
  var facts = [n[2] === "graph" ? "recorded graph" : "warmup run", "generation " + n[5], n[6] + (n[6] === 1 ? " replay" : " replays"),
    n[3] == null ? "a root" : "parent " + n[3], n[4].length ? "children " + n[4].join(", ") : "no children"];
  if (snap.cur === n[0]) facts.push("current node"); else if (snap.path.indexOf(n[0]) >= 0) facts.push("on the current path");
  box.appendChild(el("div", "facts", facts.join(" · ")));
  if (n[7]) box.appendChild(el("div", "facts", "inputs: " + n[7]));
  if (!n[8].length) { box.appendChild(el("p", "msg", "No outputs.")); return; }
  var t = el("table"), h = el("tr"), alias = n[8].some(function (o) { return o[6]; });
  ["#", "state", "shape", "dtype", "size", "address"].concat(alias ? ["alias of"] : []).forEach(function (c) { h.appendChild(el("th", null, c)); });
  t.appendChild(h);
  n[8].forEach(function (o) {
    var tr = el("tr");
    tr.appendChild(el("td", null, o[0])); tr.appendChild(el("td", "st-" + o[1], ({live: "● ", dead: "○ ", invalid: "✕ "}[o[1]] || "") + o[1]));
    tr.appendChild(el("td", null, o[2])); tr.appendChild(el("td", null, o[3])); tr.appendChild(el("td", null, o[4]));
    tr.appendChild(el("td", "addr", o[5])); if (alias) tr.appendChild(el("td", null, o[6]));
    t.appendChild(tr);
  });
  var wrap = el("div", "table-wrap"); wrap.appendChild(t); box.appendChild(wrap);
}
function markSelected() {
  var old = $("tree-box").querySelectorAll(".cg-sel");
  for (var i = 0; i < old.length; i++) old[i].classList.remove("cg-sel");
  if (sel != null) { var g = $("tree-box").querySelector('[id="node-' + sel + '"]'); if (g) g.classList.add("cg-sel"); }
}
var boxW = 0;
function measure() { boxW = $("tree-box").clientWidth - 12; }
function naturalWidth(svg) { var w = svg.getAttribute("width") || "", v = parseFloat(w); return /pt$/.test(w) ? v * 4 / 3 : v; }
function placeTree(also) {
  // shrink a tree a little too wide for the panel; otherwise keep its size and scroll to the node of interest
  // (a tree drawn once per structure reads where the panel shows it, to paint only the nodes in view)
  var box = $("tree-box"), svg = box.querySelector("svg"); if (!svg) return;
  var nat = naturalWidth(svg), fit = $("fit").checked || (nat > boxW && boxW / nat >= 0.6);
  box.classList.toggle("fit", fit);
  paintNodes(also);
  if (!fit && nat > boxW) requestAnimationFrame(scrollToNode);
}
function scrollToNode() {
  var box = $("tree-box"), g = box.querySelector(".cg-sel") || box.querySelector(".state-active") || box.querySelector(".state-current");
  if (!g) return;
  var b = box.getBoundingClientRect(), r = g.getBoundingClientRect();
  if (r.left < b.left || r.right > b.right) box.scrollLeft += (r.left + r.right) / 2 - (b.left + b.right) / 2;
  if (r.top < b.top || r.bottom > b.bottom) box.scrollTop += (r.top + r.bottom) / 2 - (b.top + b.bottom) / 2;
}
function show(i, keepHash) {
  if (!N) return;
  i = Math.max(0, Math.min(N - 1, i | 0));
  var st = S[i], row = rows[i];
  if (cur >= 0) rows[cur].classList.remove("cur");
  cur = i; row.classList.add("cur");
  var lst = $("steps"); if (row.offsetTop < lst.scrollTop || row.offsetTop + row.offsetHeight > lst.scrollTop + lst.clientHeight) lst.scrollTop = row.offsetTop - lst.clientHeight / 3;
  $("now").className = "k-" + row.dataset.kind; var hl = $("headline"); hl.textContent = "";
  hl.appendChild(el("span", null, "step " + (i + 1) + "/" + N + " · "));
  var blk = row.querySelector(".blk"), text = row.querySelector(".hl").textContent + (blk ? blk.textContent : ""), sp = text.indexOf(" ");
  hl.appendChild(el("span", "kind", sp < 0 ? text : text.slice(0, sp)));
  if (sp >= 0) hl.appendChild(el("span", null, text.slice(sp)));
  $("reason").textContent = row.querySelector(".why").textContent;
  var b = $("banner");
  if (st[4] >= 0) { var bn = D.banners[st[4]]; b.textContent = ""; b.appendChild(el("div", null, bn.head)); if (bn.items.length) { var ul = el("ul"); bn.items.forEach(function (t) { ul.appendChild(el("li", null, t)); }); b.appendChild(ul); } b.hidden = false; }
  else b.hidden = true;
  if (st[0] < 0) {
    if (shownTree !== -1) { shownTree = shownStruct = -1; shownLines = null; msg($("tree-box"), $("tree-box").dataset.empty || "No snapshot was recorded for this step."); }
  } else if (T) { shownTree = -2; var also = setTreeState(i, st); }
  else if (st[0] !== shownTree) { shownTree = st[0]; setTree(st[0]); }
  markSelected(); placeTree(also);
  if (st[1] !== shownPool) { shownPool = st[1]; if (st[1] >= 0) setPool(st[1]); else { poolShown = null; msg($("pool-box"), "No snapshot of the pool for this step."); } }
  if (st[2] >= 0) {
    var sn = D.snaps[st[2]], word = {warmup: "warming up", recording: "recording", execution: "replaying"}[sn.state] || sn.state;
    $("snapinfo").textContent = "generation " + sn.gen + " · " + (sn.path.length ? word + " path " + (sn.path.length > 12 ? sn.path.slice(0, 3).join(" → ") + " → … → " + sn.path.slice(-3).join(" → ") + " (" + sn.path.length + " nodes)" : sn.path.join(" → ")) + (sn.cur == null ? "" : " · current node " + sn.cur) : "no current path: the next call starts from the roots") +
      (row.dataset.fold ? " · as after the last of its ×" + row.dataset.fold + " repeats" : "");
  }
  else $("snapinfo").textContent = "";
  poolMark(nodeTable(st));
  slider.value = i; $("pos").textContent = "step " + (i + 1) + " / " + N;
  $("first").disabled = $("prev").disabled = i === 0; $("last").disabled = $("next").disabled = i === N - 1;
  if (D.tx.length) $("marker").style.left = (D.tx[i] * 100) + "%";
  if (!keepHash) { try { history.replaceState(null, "", "#step=" + (i + 1) + (sel != null ? "&node=" + sel : "")); } catch (e) {} }
}
function fromHash() {
  var m = /step=(\d+)/.exec(location.hash), k = /node=(\d+)/.exec(location.hash);
  sel = k ? +k[1] : null;
  show(m ? +m[1] - 1 : (cur < 0 ? 0 : cur), true);
}
if (!N) return;
var emptyMsg = $("headline").textContent; if (emptyMsg) $("tree-box").dataset.empty = emptyMsg;
$("first").onclick = function () { show(0); };
$("prev").onclick = function () { show(cur - 1); };
$("next").onclick = function () { show(cur + 1); };
$("last").onclick = function () { show(N - 1); };
slider.oninput = function () { show(+slider.value); };
$("steps").onclick = function (e) { var li = e.target.closest("li"); if (li) show(+li.dataset.i); };
$("fit").onchange = function () { placeTree(); };
$("tree-box").addEventListener("scroll", function () { paintNodes(); });
window.addEventListener("resize", function () { measure(); placeTree(); });
measure();
$("tree-box").onclick = function (e) {
  var g = e.target.closest('[id^="node-"]'); if (!g) return;
  var id = +g.id.slice(5); sel = sel === id ? null : id; show(cur);
};
$("timeline-box").onclick = function (e) {
  var r = $("timeline-inner").getBoundingClientRect(), f = (e.clientX - r.left) / r.width, best = 0;
  for (var i = 1; i < D.tx.length; i++) if (Math.abs(D.tx[i] - f) < Math.abs(D.tx[best] - f)) best = i;
  show(best);
};
document.addEventListener("keydown", function (e) {
  if (e.altKey || e.ctrlKey || e.metaKey || (e.target.tagName === "INPUT" && e.target.type !== "checkbox")) return;
  var to = {ArrowLeft: cur - 1, ArrowRight: cur + 1, Home: 0, End: N - 1}[e.key];
  if (to != null) { e.preventDefault(); show(to); }
});
window.addEventListener("hashchange", fromHash);
fromHash();
})();
