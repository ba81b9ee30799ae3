// The step list's rows: their tops from measured heights and an estimate, the row at a height, the
// rows to build around the view, and the scroll that shows the current row.
import { test } from "node:test";
import assert from "node:assert/strict";
import { logic } from "./fixture.mjs";

const { rowTops, rowAt, rowsWanted, scrollShowing } = logic;

test("rows are 40 px until measured; the estimate stands for the rows not measured", () => {
  assert.deepEqual(rowTops(3, [], 0), [0, 40, 80, 120]);
  assert.deepEqual(rowTops(4, [10, , 30], 20), [0, 10, 30, 60, 80]);
  assert.deepEqual(rowTops(0, [], 0), [0]);
});

test("the row at a height: the row whose span holds it, the first or last beyond the list", () => {
  const tops = rowTops(5, [], 0);  // 0, 40, ..., 200
  assert.equal(rowAt(tops, 5, 0), 0);
  assert.equal(rowAt(tops, 5, 39), 0);
  assert.equal(rowAt(tops, 5, 40), 1);
  assert.equal(rowAt(tops, 5, 199), 4);
  assert.equal(rowAt(tops, 5, -500), 0);
  assert.equal(rowAt(tops, 5, 1e9), 4);
  assert.equal(rowAt([0], 0, 100), 0);
});

test("the rows built: a view's height above and below the view", () => {
  const n = 1000, tops = rowTops(n, [], 0);  // 40 px a row
  // a 400 px view at 4000 (rows 100..109): from 4000 - 400 to 4400 + 400
  assert.deepEqual(rowsWanted(tops, n, 0, 0, 4000, 400), [90, 121]);
  // no size yet: 300 px around the current row's top
  assert.deepEqual(rowsWanted(tops, n, 0, 0, 4000, 0), [92, 108]);
  // at the ends, what there is
  assert.deepEqual(rowsWanted(tops, n, 0, 0, 0, 400), [0, 21]);
  assert.deepEqual(rowsWanted(tops, n, 0, 0, 40000 - 400, 400), [980, 1000]);
});

test("the rows built stay while the view is within half a view of their ends", () => {
  const n = 1000, tops = rowTops(n, [], 0);
  assert.equal(rowsWanted(tops, n, 90, 121, 4000, 400), null);
  assert.equal(rowsWanted(tops, n, 90, 121, 4000 + 40, 400), null, "a row's scroll");
  assert.deepEqual(rowsWanted(tops, n, 90, 121, 4000 + 400, 400), [100, 131], "a view's scroll: built again");
  assert.equal(rowsWanted(tops, n, 0, 21, 0, 400), null, "the first rows need nothing above");
  assert.equal(rowsWanted(tops, n, 980, 1000, 40000 - 400, 400), null, "the last rows need nothing below");
  assert.deepEqual(rowsWanted(tops, n, 5, 5, 4000, 400), [90, 121], "none built");
});

test("the scroll that shows the current row: kept when it shows, else the row a third of the way down", () => {
  const n = 100, tops = rowTops(n, [], 0);
  assert.equal(scrollShowing(tops, n, 10, 300, 400), 300, "row 10 (400..440) shows in 300..700");
  assert.equal(scrollShowing(tops, n, 50, 300, 300), 2000 - 100);
  assert.equal(scrollShowing(tops, n, 1, 300, 300), 0, "not above the list's top");
  assert.equal(scrollShowing(tops, n, 99, 0, 300), 4000 - 300, "not below its end");
  assert.equal(scrollShowing(tops, n, 50, 123, 0), 123, "a list with no size keeps its scroll");
  assert.equal(scrollShowing(tops, n, 17, 300, 400), 680 - 400 / 3, "a row cut at the bottom");
});
