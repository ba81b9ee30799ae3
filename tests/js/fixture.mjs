// What the unit tests share: the logic module (CommonJS, as Node loads explorer_logic.js alone),
// the payload's field orders as views/payload.py declares them, and records packed by name.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
export const logic = require("../../cgviz/views/page/explorer_logic.js");

// tests/test_payload.py checks that these are payload.FIELDS
export const FIELDS = {
  step: ["tree", "pool", "snap", "node", "banner"],
  row: ["kind", "headline", "reason", "note", "times", "graph"],
  node: ["id", "function", "kind", "parent", "children", "generation", "replays", "signature", "outputs"],
  output: ["index", "state", "shape", "dtype", "size", "address", "alias_of", "values"],
  meta: ["key", "text"],
  kind_count: ["kind", "count"],
  kernel: ["label", "count", "name"],
  pool: ["title", "subtitle", "segs", "legend", "widened"],
  seg: ["label", "blocks"],
  block: ["x", "width", "style", "node", "tip", "labels"],
  pstyle: ["category", "color", "tone"],
  legend: ["style", "text", "node"],
  struct: ["tree", "first", "state"],
  look: ["cls", "fill", "markup", "count_at", "count_template"],
  node_state: ["node", "look", "replays"],
};

/** A record of `fields[name]` as a list, from its values by name (absent: null). */
export function pack(fields, name, values) {
  return fields[name].map((k) => (k in values ? values[k] : null));
}

/** A head as PageData.head sends it, with `rows` ({kind, headline, ...} objects) packed. */
export function head(fields, rows, extra = {}) {
  return Object.assign({
    title: "t", header: {meta: [], count: rows.length + " steps", kinds: []}, n: rows.length, start: 0,
    rows: rows.map((r) => pack(fields, "row", Object.assign({note: "", reason: "", times: 1}, r))),
    empty: "", notices: [], timeline: "", tx: [], tband: [], colors: {}, findings: [], widened: "widened",
    repeats: " · ran {n} times", profile: {}, graphs: "", graph_step: "a CUDA graph's step", fields,
  }, extra);
}
