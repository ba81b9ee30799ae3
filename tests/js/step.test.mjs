// What a step shows: the tree's node states at step i (keyframes and deltas), the step's headline,
// tree case, snapshot line (folded repeats said) and banner.
import { test } from "node:test";
import assert from "node:assert/strict";
import { FIELDS, head, logic, pack } from "./fixture.mjs";

const { treeStateAt, stepAt, nodeShown, newModel, applyHead, mergePiece, decodeHead, decodePiece } = logic;

// a page's tree states: keyframes at 0 and 4; node 1 changes look at 1, its replays at 2 and 3,
// node 2 appears at 2 and goes at 5
const T = {
  keys: {0: [1, 0, 0], 4: [1, 1, 3, 2, 0, 0]},
  delta: {1: [1, 1, 0], 2: [1, 1, 1, 2, 0, 0], 3: [1, 1, 3], 5: [2, -1, 0], 6: []},
};
const WANT = [
  {1: {look: 0, replays: 0}},
  {1: {look: 1, replays: 0}},
  {1: {look: 1, replays: 1}, 2: {look: 0, replays: 0}},
  {1: {look: 1, replays: 3}, 2: {look: 0, replays: 0}},
  {1: {look: 1, replays: 3}, 2: {look: 0, replays: 0}},
  {1: {look: 1, replays: 3}},
  {1: {look: 1, replays: 3}},
];

test("the node states at every step, stepping on", () => {
  const memo = {state: null, at: -1};
  WANT.forEach((want, i) => assert.deepEqual(treeStateAt(T, FIELDS, i, memo), want, `step ${i}`));
});

test("the node states at every step, each reached by a jump from elsewhere", () => {
  for (let from = 0; from < WANT.length; from++) {
    for (let i = 0; i < WANT.length; i++) {
      const memo = {state: null, at: -1};
      treeStateAt(T, FIELDS, from, memo);
      assert.deepEqual(treeStateAt(T, FIELDS, i, memo), WANT[i], `step ${i} after step ${from}`);
    }
  }
});

test("stepping on applies only the next delta (a keyframe is not reread)", () => {
  const memo = {state: null, at: -1}, before = treeStateAt(T, FIELDS, 1, memo);
  assert.equal(treeStateAt(T, FIELDS, 2, memo), before, "the same state, brought forward");
  assert.equal(memo.at, 2);
});

function model(rows, steps, extra = {}) {
  const m = newModel(FIELDS);
  applyHead(m, decodeHead(head(FIELDS, rows, extra)));
  const at = {};
  steps.forEach((s, i) => { if (s) at[i] = pack(FIELDS, "step", s); });
  mergePiece(m, decodePiece(FIELDS, Object.assign({at, snaps: [{n: [], path: [0], cur: 0, info: "generation 1 · path 0"}],
    banners: [{head: "new generation", items: []}]}, extra.piece || {})));
  return m;
}
const snapped = {tree: 0, pool: 0, snap: 0, node: 0, banner: -1};

test("a folded step's snapshot line says how often it ran; a step run once says nothing more", () => {
  const m = model([{kind: "execute", headline: "A", times: 1}, {kind: "execute", headline: "A", note: " · ×40 (step 1 of a 2-step block)", times: 40},
    {kind: "execute", headline: "A", note: " · ×2 (step 2 of a 2-step block)", times: 2}], [snapped, snapped, snapped]);
  assert.equal(stepAt(m, 0).snapInfo, "generation 1 · path 0");
  assert.equal(stepAt(m, 1).snapInfo, "generation 1 · path 0 · ran 40 times");
  assert.equal(stepAt(m, 2).snapInfo, "generation 1 · path 0 · ran 2 times");
  assert.deepEqual(stepAt(m, 1).row.note, " · ×40 (step 1 of a 2-step block)");
});

test("the headline: the step's place, then the kind's word found in the headline and the folded note", () => {
  const m = model([{kind: "record", headline: "rank 1 · record B → node 3", note: " · ×2"}, {kind: "warmup", headline: "warmup A"}], [snapped, snapped]);
  assert.deepEqual(stepAt(m, 0).headline, ["step 1/2 · rank 1 · ", "record", " B → node 3 · ×2"]);
  assert.deepEqual(stepAt(m, 1).headline, ["step 2/2 · ", "warmup", " A"]);
});

test("a step is clamped to the trace, and shows nothing until its pictures come", () => {
  const m = model([{kind: "a", headline: "a"}, {kind: "b", headline: "b"}, {kind: "c", headline: "c"}], [snapped, null, snapped]);
  assert.equal(stepAt(m, -4).i, 0);
  assert.equal(stepAt(m, 99).i, 2);
  const loading = stepAt(m, 1);
  assert.equal(loading.rec, null); assert.equal(loading.tree, null); assert.equal(loading.snapInfo, "");
});

test("the tree panel's case: drawn whole, from node states, or none with its reason", () => {
  const none = {tree: -1, pool: -1, snap: -1, node: null, banner: 0};
  const m = model([{kind: "execute", headline: "x"}, {kind: "graph_replay", headline: "y", graph: 3}, {kind: "execute", headline: "z"}],
    [snapped, none, none]);
  assert.deepEqual(stepAt(m, 0).tree, {kind: "whole"});
  assert.deepEqual(stepAt(m, 1).tree, {kind: "none", id: -3, msg: "a CUDA graph's step"});
  assert.deepEqual(stepAt(m, 2).tree, {kind: "none", id: -1, msg: "No snapshot was recorded for this step."});
  assert.deepEqual(stepAt(m, 2).banner, {head: "new generation", items: []});
  assert.equal(stepAt(m, 2).snap, null);
  m.empty = "This trace keeps steps and reasons only.";
  assert.deepEqual(stepAt(m, 1).tree, {kind: "none", id: -1, msg: m.empty}, "a trace without pictures says why, whatever the step");
  m.tree = {structs: [], looks: [], keys: {}, delta: {}};
  assert.deepEqual(stepAt(m, 0).tree, {kind: "states"});
});

test("the node panel shows the node selected, else the step's, else the current one", () => {
  const nodes = {0: {id: 0}, 3: {id: 3}}, snap = {cur: 0, path: [0]};
  assert.equal(nodeShown(nodes, snap, 3, 0).id, 3);
  assert.deepEqual(nodeShown(nodes, snap, null, 3), {id: 3, how: "the node of this step · click a node to pin it"});
  assert.deepEqual(nodeShown(nodes, snap, 9, null), {id: 0, how: "node 9 does not exist at this step; showing the current node · click a node to pin it"});
  assert.equal(nodeShown({}, {cur: null, path: []}, null, null).how, "No nodes yet.");
});
