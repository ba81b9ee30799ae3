// Decoding the payload: records read by the field names the head declares, whatever their order.
import { test } from "node:test";
import assert from "node:assert/strict";
import { FIELDS, head, logic, pack } from "./fixture.mjs";

const { decodeHead, decodePiece, lineIndex, newModel, applyHead, mergePiece, growModel } = logic;

// the same records in another order: decoding must follow the names, not the positions
const REVERSED = Object.fromEntries(Object.entries(FIELDS).map(([k, v]) => [k, [...v].reverse()]));

for (const [label, fields] of [["declared order", FIELDS], ["reversed order", REVERSED]]) {
  test(`the head's records are read by name (${label})`, () => {
    const raw = head(fields, [{kind: "warmup", headline: "A", reason: "first", times: 1},
      {kind: "execute", headline: "B", note: " · ×3", times: 3, graph: 7}], {
      header: {meta: [pack(fields, "meta", {key: "backend", text: "sim"})], count: "2 steps",
        kinds: [pack(fields, "kind_count", {kind: "warmup", count: 1})]},
      profile: {4: {time: "1 ms", kernels: [pack(fields, "kernel", {label: "gemm", count: 2, name: "sm90_gemm"})]}},
    });
    const h = decodeHead(raw);
    assert.deepEqual(h.rows[0], {kind: "warmup", headline: "A", reason: "first", note: "", times: 1, graph: null});
    assert.deepEqual(h.rows[1], {kind: "execute", headline: "B", reason: "", note: " · ×3", times: 3, graph: 7});
    assert.deepEqual(h.header.meta, [{key: "backend", text: "sim"}]);
    assert.deepEqual(h.header.kinds, [{kind: "warmup", count: 1}]);
    assert.deepEqual(h.profile[4].kernels, [{label: "gemm", count: 2, name: "sm90_gemm"}]);
    assert.equal(raw.rows[0].length, 6, "the raw head is left as it came");
  });

  test(`a piece's records are read by name (${label})`, () => {
    const out = pack(fields, "output", {index: 0, state: "live", shape: "[4]", dtype: "float32", size: "16 B", address: "0x10", alias_of: "", values: ""});
    const raw = {
      steps: [pack(fields, "step", {tree: 0, pool: 1, snap: 2, node: 5, banner: -1}), null],
      nodes: [pack(fields, "node", {id: 5, function: "f", kind: "graph", parent: null, children: [6], generation: 1, replays: 2, signature: "", outputs: [out]})],
      segs: [pack(fields, "seg", {label: "seg 0", blocks: [0, 5000, 0, 5, 1, 2]})],
      pstyles: [pack(fields, "pstyle", {category: "live", color: "#fff", tone: "#000"})],
      legends: [[pack(fields, "legend", {style: 0, text: "live", node: -1})]],
      pools: [pack(fields, "pool", {title: "pool", subtitle: "sub", segs: [0], legend: 0, widened: 0})],
      tree: {structs: [[3, 0]], looks: [pack(fields, "look", {cls: "c", fill: "#eee", markup: "<rect/>", count_at: 1, count_template: "\ue000"})],
        delta: [[], [5, 0, 3]], keys: {0: [5, 0, 2]}, every: 100},
      lines: ["<svg>"], trees: [[0, 1]], snaps: [{n: [0, 1], path: [5], cur: 5}], banners: [], ptexts: ["tip", "label"],
    };
    const p = decodePiece(fields, raw);
    assert.deepEqual(p.at, {0: {tree: 0, pool: 1, snap: 2, node: 5, banner: -1}}, "a step left out (null) is not filled");
    assert.deepEqual(p.nodes[0].outputs[0], {index: 0, state: "live", shape: "[4]", dtype: "float32", size: "16 B", address: "0x10", alias_of: "", values: ""});
    assert.equal(p.nodes[0].parent, null); assert.deepEqual(p.nodes[0].children, [6]);
    assert.deepEqual(p.segs[0], {label: "seg 0", blocks: [0, 5000, 0, 5, 1, 2]}, "a segment's blocks stay flat");
    assert.deepEqual(p.pstyles[0], {category: "live", color: "#fff", tone: "#000"});
    assert.deepEqual(p.legends[0], [{style: 0, text: "live", node: -1}]);
    assert.deepEqual(p.pools[0], {title: "pool", subtitle: "sub", segs: [0], legend: 0, widened: 0});
    assert.equal(p.tree.looks[0].count_at, 1);
    assert.deepEqual(p.tree.delta, {0: [], 1: [5, 0, 3]}, "the page's deltas keyed by step, as a widget's are");
    assert.deepEqual(p.lines, ["<svg>"]); assert.deepEqual(p.ptexts, ["tip", "label"]);
  });
}

test("a page's structure, drawn in the state of its first step, names no state of its own", () => {
  const p = decodePiece(FIELDS, {tree: {structs: [[3, 7], [4, -1, [1, 0, 0]]], looks: [], delta: {}, keys: {}}});
  assert.deepEqual(p.tree.structs, [{tree: 3, first: 7, state: null}, {tree: 4, first: -1, state: [1, 0, 0]}]);
});

test("a widget's piece names its steps by index", () => {
  const p = decodePiece(FIELDS, {at: {12: pack(FIELDS, "step", {tree: -1, pool: -1, snap: -1, node: null, banner: -1})}});
  assert.deepEqual(Object.keys(p.at), ["12"]);
  assert.equal(p.at[12].node, null);
  assert.deepEqual(p.nodes, []);
});

test("runs of line indices", () => {
  assert.deepEqual(lineIndex([4, 3, 0, 2]), [4, 5, 6, 0, 1]);
  assert.deepEqual(lineIndex([]), []);
});

test("pieces merge: items append, steps fill, a growing trace forgets the steps rewritten", () => {
  const m = newModel(FIELDS), step = (tree) => pack(FIELDS, "step", {tree, pool: -1, snap: -1, node: null, banner: -1});
  applyHead(m, decodeHead(head(FIELDS, [{kind: "a", headline: "a"}, {kind: "b", headline: "b"}, {kind: "c", headline: "c"}])));
  assert.deepEqual(m.steps, [null, null, null]);
  const tree = (keys, delta) => ({structs: [], looks: [], keys, delta});
  assert.deepEqual(mergePiece(m, decodePiece(FIELDS, {at: {0: step(0), 1: step(1)}, lines: ["x"], tree: tree({0: []}, {1: []})})), [0, 1]);
  assert.deepEqual(mergePiece(m, decodePiece(FIELDS, {at: {2: step(2)}, lines: ["y"], tree: tree({2: [9, 0, 0]}, {})})), [2]);
  assert.deepEqual(m.lines, ["x", "y"]);
  assert.deepEqual(m.steps.map((s) => s.tree), [0, 1, 2]);
  growModel(m, 1);
  assert.deepEqual(m.steps.length, 1);
  assert.deepEqual(Object.keys(m.tree.keys), ["0"]); assert.deepEqual(Object.keys(m.tree.delta), []);
  applyHead(m, decodeHead(head(FIELDS, [{kind: "d", headline: "d"}], {start: 1, n: 2})));
  assert.deepEqual(m.rows.map((r) => r.kind), ["a", "d"]);
  assert.deepEqual(m.steps, [m.steps[0], null]);
});
