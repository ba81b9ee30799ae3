// Asking the kernel for pictures: the step shown at once, its neighbours nearest first in batches,
// one neighbours' ask in flight at a time, asks not sent dropped by the next step's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { logic } from "./fixture.mjs";

const { newAsks, planAsks, nextAsk, answered, forgetAsks } = logic;
const none = () => false;

test("the step at once, then its neighbours nearest first, eight at a time, one batch in flight", () => {
  const asks = newAsks(), sent = planAsks(asks, 50, 1000, none, 0);
  assert.deepEqual(sent, [[50], [51, 49, 52, 48, 53, 47, 54, 46]]);
  // 16 either side, then 17..32 ahead only: 1 + 32 + 16 = 49 steps asked
  assert.deepEqual(asks.queue.flat().length, 49 - 9);
  assert.deepEqual(asks.queue.at(-1), [75, 76, 77, 78, 79, 80, 81, 82]);
  assert.equal(nextAsk(asks, 1), null, "a batch is in flight");
  answered(asks, [50]);
  assert.equal(nextAsk(asks, 2), null, "the step's own answer: the batch is still in flight");
  answered(asks, [51, 49, 52, 48, 53, 47, 54, 46]);
  assert.deepEqual(nextAsk(asks, 3), [55, 45, 56, 44, 57, 43, 58, 42]);
});

test("steps here, or asked already, are not asked for", () => {
  const asks = newAsks(), have = (k) => k % 2 === 0;
  const sent = planAsks(asks, 10, 20, have, 0);
  assert.deepEqual(sent, [[11, 9, 13, 7, 15, 5, 17, 3]], "step 10 is here: no ask of its own");
  assert.deepEqual(planAsks(asks, 11, 20, have, 1), [], "the next step's neighbours were asked or queued");
});

test("the trace's ends bound the asks", () => {
  const asks = newAsks();
  assert.deepEqual(planAsks(asks, 0, 3, none, 0), [[0], [1, 2]]);
  assert.deepEqual(planAsks(newAsks(), 2, 3, none, 0), [[2], [1, 0]]);
});

test("a jump drops the queued asks of the step before; those are asked again when needed", () => {
  const asks = newAsks();
  planAsks(asks, 100, 1000, none, 0);
  const sent = planAsks(asks, 500, 1000, none, 1);
  assert.deepEqual(sent, [[500]], "the old neighbours' batch is still in flight");
  assert.ok(asks.queue.flat().every((k) => k >= 484 && k <= 532));
  // back: step 100 and its first batch were sent (still asked); the rest is queued again
  assert.deepEqual(planAsks(asks, 100, 1000, none, 2), []);
  assert.deepEqual(asks.queue[0], [105, 95, 106, 94, 107, 93, 108, 92]);
  assert.ok(asks.queue.flat().every((k) => k < 484), "the jump's queue is dropped");
});

test("an answer that never came is forgotten after 10 s", () => {
  const asks = newAsks();
  planAsks(asks, 50, 1000, none, 0);
  assert.equal(nextAsk(asks, 9999), null);
  assert.deepEqual(nextAsk(asks, 10000), [55, 45, 56, 44, 57, 43, 58, 42]);
});

test("a growing trace asks again for the steps it rewrote", () => {
  const asks = newAsks();
  planAsks(asks, 5, 10, none, 0);
  forgetAsks(asks, 8);
  assert.deepEqual(Object.keys(asks.asked).map(Number).sort((a, b) => a - b), [0, 1, 2, 3, 4, 5, 6, 7]);
});
