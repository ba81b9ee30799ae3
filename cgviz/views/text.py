"""Every sentence cgviz shows people, in one place, so each host words a thing the same way.

The generation banner, a node's output rows, the line under the tree (where the path is), the
`%%cudagraph` summary and the CLI's step listing are written here; the page, the widget, the
magics and the CLI only place them. What producers say too (bytes and times in trace/units.py;
step headlines, a node's times and its kernels in trace/words.py) is defined there and
re-exported here. Pure text: no torch, no matplotlib, nothing that needs a trace's producer.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from cgviz.trace.units import format_bytes, format_us, plural  # noqa: F401  (re-exported)
from cgviz.trace.words import headline, kernel_label, kernel_summary, time_line  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from cgviz.trace.model import OutputView, Snapshot, Step, Trace

__all__ = [
    "format_bytes", "plural", "headline", "generation_banner", "output_row", "path_line", "REPEATS_NOTE",
    "KIND_WORDS", "cell_summary", "findings_line", "wrap", "step_lines", "format_us", "time_line", "time_lines", "kernel_label",
    "kernel_summary", "value_text", "ranks_summary", "devices_summary", "trace_counts", "rank_count_lines",
    "device_count_lines", "shown", "GRAPHS_TITLE", "GRAPHS_BY_SITE", "GRAPHS_BY_POOL", "GRAPHS_OF_TREES", "GRAPHS_LANE",
    "TREE_LANE", "GRAPHS_ONLY", "GRAPH_STEP_NOTE", "graphs_summary", "padding_text", "family_facts", "size_label",
    "size_facts", "pool_facts", "tree_graph_line",
]

#: The words for a step kind counted in a summary ("3 replays").
KIND_WORDS: tuple[tuple[str, str], ...] = (
    ("warmup", "warmups"),
    ("record", "recordings"),
    ("execute", "replays"),
    ("eager", "eager fallbacks"),
    ("generation", "generations"),
    ("path_end", "path ends"),
    ("error", "errors"),
    ("checkpoint_restore", "checkpoint restores"),
    ("compile", "compile-time decisions"),
    ("capture", "graph captures"),
    ("replay", "graph replays"),
    ("destroy", "graphs destroyed"),
)

# what no drawing writes as it is: control characters (line breaks among them), the line and
# paragraph separators, lone surrogates (UTF-8 cannot encode them) and the two non-characters XML
# refuses; and in a name, the private-use characters the page's drawings hold as placeholders
# (views/tree/frames.py: REPLAYS, WIDTH, CENTRE)
_CONTROLS = "\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff"
_UNSHOWN_RE = re.compile(f"[{_CONTROLS}\ue000-\ue002]")
_CONTROL_RE = re.compile(f"[{_CONTROLS}]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(m: "re.Match") -> str:
    c = m.group()
    return _NAMED_ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def shown(text: str, *, placeholders: bool = True) -> str:
    """`text` (a name from a trace) as a drawing writes it: each control character, line or
    paragraph separator, lone surrogate or XML non-character as its escape text (``\\n``,
    ``\\x07``, ``\\u2028``), so that a name stays one visible line and any renderer takes it
    (Graphviz refuses NUL, ESC or BEL in a label; a line break would cut a drawing's line);
    with `placeholders`, also U+E000 to U+E002, which the page's drawings use as placeholders
    (False: for text that holds them as such). Text without any comes back as it is."""
    found = _UNSHOWN_RE if placeholders else _CONTROL_RE
    return found.sub(_escape_char, text) if found.search(text) else text


_PATH_WORDS = {"warmup": "warming up", "recording": "recording", "execution": "replaying"}

#: Said after `path_line` for a step that stands for several folded repeats ({n}: how many).
REPEATS_NOTE = " · as after the last of its ×{n} repeats"


def generation_banner(generation: int, invalidated: list[str]) -> str:
    """What a new generation did to the outputs still live on the path (`invalidated`: each
    output in words): with torch's trees they may be older than the generation that ends, and
    its error's first words differ by release, so only its common end is quoted."""
    n = len(invalidated)
    if not n:
        return f"Generation {generation} begins: nothing live was invalidated."
    return (f"Generation {generation} begins: {plural(n, 'output')} still live on the path "
            f"{'is' if n == 1 else 'are'} now invalid. Using {'it' if n == 1 else 'one'} raises an error: \u201c\u2026 "
            f"has been overwritten by a subsequent run\u201d.")


def output_row(o: "OutputView") -> list:
    """A node's output as the output table shows it: state first, then #, shape, dtype, size,
    address, alias."""
    address = "" if o.address is None else f"{o.address:#x}"
    if not o.described:  # torch keeps no metadata for the outputs of its warmup runs
        return [o.index, o.state, "not recorded", "", "", address, o.alias_of or "", value_text(o.values)]
    shape = "[" + ", ".join(str(d) for d in o.shape) + "]"
    return [o.index, o.state, shape, o.dtype, format_bytes(o.nbytes), address, o.alias_of or "", value_text(o.values)]


def path_line(snap: "Snapshot") -> str:
    """Where the tree is after a step: 'generation 1 · replaying path 2 → 5 · current node 5'."""
    p = [str(n) for n in snap.path]
    if not p:
        return f"generation {snap.generation} · no current path: the next call starts from the roots"
    path = " → ".join(p) if len(p) <= 12 else " → ".join(p[:3]) + " → … → " + " → ".join(p[-3:]) + f" ({len(p)} nodes)"
    current = "" if snap.current_node is None else f" · current node {snap.current_node}"
    return f"generation {snap.generation} · {_PATH_WORDS.get(snap.state, snap.state)} path {path}{current}"


# -- the %%cudagraph summary ------------------------------------------------------------------------
def cell_summary(activity: Any) -> list[str]:
    """The plain-text lines for what one tree did in a cell (a `magics.TreeActivity`): counts
    that are not zero, eager and error reasons, the pool, where the tree is now, and a findings
    line; wrapped to 80 columns."""
    total = activity.before + activity.new
    lines = [f"{activity.label}: {plural(activity.new, 'new step')} ({total} in its trace)"]
    if activity.level is None:
        lines.append("  trace=None: this tree records no steps")
        return lines
    counts = activity.counts()
    shown = [f"{word} {counts[kind]}" for kind, word in KIND_WORDS if counts.get(kind)]
    lines.append("  " + (" · ".join(shown) or "no decisions"))
    for kind, title in (("eager", "eager fallbacks"), ("error", "errors")):
        reasons = activity.reasons(kind)
        if reasons:
            lines.append(f"  {title}:")
            lines.extend(f"    {times}× {reason}" for reason, times in reasons.items())
    snapshot = activity.trace.last_snapshot() if activity.level == "full" else None
    if snapshot is not None:
        lines.append(f"  pool: {format_bytes(snapshot.reserved_bytes)} reserved · "
                     f"{format_bytes(snapshot.allocated_bytes)} allocated")
    elif activity.level != "full":
        lines.append(f"  pool: not recorded (trace={activity.level!r}; 'full' records it)")
    now = activity.now  # the tree's Snapshot after the cell (a view reads snapshots, never a live tree)
    if now is not None:
        path = " → ".join(str(n) for n in now.path) or "none"
        lines.append(f"  now: generation {now.generation} · state {now.state} · path {path} · "
                     f"{plural(len(now.nodes), 'node')}")
    if activity.new_trace is not None and activity.new:
        lines += time_lines(activity.trace.meta, {s.function for s in activity.new_trace.steps})
        lines.append(findings_line(activity.new_trace, "%cgviz doctor" if now is not None else "%cgviz doctor torch"))
    return [wrapped for line in lines for wrapped in wrap(line)]


def findings_line(trace: "Trace", doctor: str = "%cgviz doctor") -> str:
    """One line: how many findings of each severity, and the most severe one's title; `doctor`
    is the command that shows them all."""
    from cgviz.trace.diagnose import diagnose

    findings = [f for f in diagnose(trace) if f.severity != "info"]
    if not findings:
        return f"  findings: none ({doctor} shows the details)"
    counts = Counter(f.severity for f in findings)
    tally = ", ".join(plural(n, severity) for severity, n in counts.items())
    return f"  findings: {tally}; first: {findings[0].title} ({doctor} for all)"


def wrap(line: str, width: int = 80) -> list[str]:
    """A summary line wrapped to `width` columns, continuation lines indented under it."""
    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.wrap(line, width=width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def step_lines(steps: Iterable["Step"]) -> list[str]:
    """The CLI's step listing: each step's headline (counted from 1, as the explorer does) and why."""
    out = []
    for step in steps:
        out.append(f"  {step.index + 1:>3}  {headline(step)}")
        out.append(f"       why: {step.reason}")
    return out


# -- what a node costs and holds (the profile) ---------------------------------------------------------
def time_lines(meta: dict, functions: set) -> list[str]:
    """The summary's time lines: per function of `functions`, its recorded graphs' median
    replay time against its eager time (`Tree(profile=True)`)."""
    import dataclasses
    import statistics

    from cgviz.trace.profile import profile_entries, timed_graphs

    out = []
    for fn, timed in timed_graphs(profile_entries(meta)).items():
        if fn in functions:
            best = dataclasses.replace(timed[0], replay_us=statistics.median(e.replay_us for e in timed))
            out.append(f"  time: {fn} {time_line(best)}")
    return out


def value_text(values: Optional[dict]) -> str:
    """An output's values in small form: '[0.12, -0.4, 1.1, 0.3 …] min -2.1 · max 3.3 · mean 0.01'."""
    if not values:
        return ""
    n, head = values.get("n", 0), values.get("head", [])
    if not n:
        return "empty"
    items = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in head)
    text = f"[{items}{' …' if n > len(head) else ''}]"
    if "true" in values:
        return text + f" {values['true']} true of {n}"
    stats = [f"{k} {values[k]:.4g}" for k in ("min", "max", "mean") if isinstance(values.get(k), (int, float))]
    bad = [f"{values[k]} {word}" for k, word in (("nan", "NaN"), ("inf", "Inf")) if values.get(k)]
    return " · ".join([text + (" " + " · ".join(stats) if stats else "")] + bad)


#: Per-rank meta that a ranks summary says bare (where a rank ran); other keys it names.
_RANK_PLACES = ("device", "hostname", "host")
#: Per-rank meta a ranks summary leaves out: the rank itself, and the profile (the node panel's).
_RANK_UNSAID = ("rank", "world_size", "local_rank", "ranks", "profile")
#: A device as `cgviz.trace.ranks.rank_path` writes it: 'cuda:1 (NVIDIA H100 80GB HBM3)'.
_DEVICE = re.compile(r"(.*) \((.+)\)")


def ranks_summary(meta: dict) -> str:
    """A merged trace's ``meta["ranks"]`` in one line: '2 ranks of world size 2 on NVIDIA H100:
    rank 0 cuda:0 · rank 1 cuda:1'. Of each rank only what differs between the ranks is said (what
    they share is in the merged meta already), and a GPU model every device names is said once."""
    metas = [m for m in meta.get("ranks") or [] if isinstance(m, dict)]
    model = _shared_model(metas)
    head = plural(len(metas), "rank")
    if meta.get("world_size") is not None:
        head += f" of world size {meta['world_size']}"
    if model:
        head += f" on {model}"
    keys = _differing(metas)
    ranks = [" ".join([f"rank {m.get('rank', '?')}"] + [_rank_fact(k, m[k], model) for k in keys if k in m])
             for m in metas]
    return f"{head}: {' · '.join(ranks)}"


def devices_summary(devices: list) -> str:
    """A trace's ``meta["devices"]`` (trees on several devices of one process) in one line:
    '2 devices on NVIDIA H200: cuda:0 · cuda:1'; a GPU model every device names is said once."""
    names = [str(d) for d in devices]
    model = _shared_model([{"device": d} for d in names])
    head = plural(len(names), "device") + (f" on {model}" if model else "")
    return f"{head}: {' · '.join(d.removesuffix(f' ({model})') if model else d for d in names)}"


def device_count_lines(trace: "Trace") -> list[str]:
    """'  cuda:0: 6 calls · 1 graph recorded · 2 replays', one line per device whose tree made
    steps (`Step.device`), repeats counted; none for a trace of one device."""
    from collections import Counter

    from cgviz.trace.lanes import in_tree_order

    # a folded block can hold steps of several devices (a loop over them): each step counts as
    # often as it ran, without unrolling the repeats (a file may say a step repeated 10**12 times)
    steps, times = trace.steps, trace.repeats()
    devices = [d for _, d in in_tree_order((None, s.device) for s in steps if s.device is not None)]
    lines = []
    for d in devices:
        counts: Counter = Counter()
        for s, n in zip(steps, times):
            if s.device == d:
                counts[s.kind] += n
        lines.append(f"  {d}: " + " · ".join([plural(sum(counts.values()), "call")] + _kind_counts(counts)))
    return lines


def _shared_model(metas: list[dict]) -> str:
    """The GPU model in every rank's device ('cuda:0 (NVIDIA H100)'), or '' where they differ."""
    found = [_DEVICE.fullmatch(m["device"]) if isinstance(m.get("device"), str) else None for m in metas]
    models = {f.group(2) if f else "" for f in found}
    return models.pop() if len(models) == 1 else ""


def _differing(metas: list[dict]) -> list[str]:
    """The meta keys, with plain values, that not every rank has alike: where they ran first."""
    keys = {k for m in metas for k in m if k not in _RANK_UNSAID}
    plain = [k for k in keys if all(isinstance(m.get(k), (str, int, float, bool, type(None))) for m in metas)]
    differ = {k for k in plain if len({m.get(k) for m in metas}) > 1}
    return [k for k in _RANK_PLACES if k in differ] + sorted(differ - set(_RANK_PLACES))


def _rank_fact(key: str, value: Any, model: str) -> str:
    if key == "device" and model:
        value = str(value).removesuffix(f" ({model})")
    return str(value) if key in _RANK_PLACES else f"{key.replace('_', ' ')} {value}"


def trace_counts(trace: "Trace") -> str:
    """'12 steps (40 calls) · 2 graphs recorded · 30 replays': what a trace, or one rank's part of
    a merged one, holds (eager fallbacks and errors too, where there are any)."""
    counts, n, calls = trace.counts(), len(trace.steps), trace.calls
    return " · ".join([plural(n, "step") + (f" ({calls} calls)" if calls != n else "")] + _kind_counts(counts))


#: Kinds a count of a trace says only where there are any, and their words.
_COUNTED_WHERE_ANY = (("eager", "eager fallback"), ("error", "error"), ("capture", "graph capture"),
                      ("replay", "graph replay"))


def _kind_counts(counts: Mapping[str, int]) -> list[str]:
    """'2 graphs recorded', '30 replays', and the eager fallbacks, errors and steps of CUDA graphs made
    outside the trees ('7 graph captures', '300 graph replays') where there are any; a trace of
    such graphs alone says nothing of the trees'."""
    said = [plural(counts[kind], word) for kind, word in _COUNTED_WHERE_ANY if counts.get(kind)]
    if not (counts.get("record") or counts.get("execute")) and (counts.get("capture") or counts.get("replay")):
        return said
    return [plural(counts.get("record", 0), "graph") + " recorded", plural(counts.get("execute", 0), "replay")] + said


def rank_count_lines(parts: Mapping[int, "Trace"]) -> list[str]:
    """'  rank 0: 12 steps · 2 graphs recorded · 10 replays', one line per rank's part."""
    return [f"  rank {rank}: {trace_counts(trace)}" for rank, trace in parts.items()]


# -- CUDA graphs made outside the trees (`cgviz.observe_graphs`; views/graph_list.py) -----------------
GRAPHS_TITLE = "CUDA graphs"
GRAPHS_BY_SITE = "By the code that captured them"
GRAPHS_BY_POOL = "By memory pool"
GRAPHS_OF_TREES = "Graphs of torch.compile's trees"
#: The timeline's lane of such graphs' steps, where a trace holds tree steps too, and the trees' lane.
GRAPHS_LANE = "CUDA graphs"
TREE_LANE = "tree"
#: Where a tree would be drawn, for a trace whose steps are all such graphs'.
GRAPHS_ONLY = ("This trace holds CUDA graphs captured outside torch.compile's trees: there is no tree to draw. "
               "The list of CUDA graphs shows them, by the code that captured them and by memory pool.")
#: Where a tree would be drawn, for such a graph's step in a trace that has trees too.
GRAPH_STEP_NOTE = ("This step is a CUDA graph's, captured outside torch.compile's trees: it changes no tree. "
                   "The list of CUDA graphs shows the graph.")


def graphs_summary(graphs: int, replays: int, pools: int, of_trees: int = 0) -> str:
    """'7 graphs · 300 replays · 1 memory pool' (the graphs outside the trees), '· 2 graphs of the
    trees' where some are a tree's node (`of_trees`)."""
    parts = [plural(graphs, "graph"), plural(replays, "replay"), plural(pools, "memory pool")] if graphs else []
    return " · ".join(parts + ([f"{plural(of_trees, 'graph')} of the trees"] if of_trees else []))


def padding_text(share: Optional[float]) -> str:
    """'30% padding' (the share of the rows replayed that were padding), 'no padding'; '' where
    the caller never said how many rows were in use."""
    if share is None:
        return ""
    return "no padding" if share <= 0 else f"{share:.0%} padding"


def family_facts(graphs: int, sizes: int, replays: int, padding: Optional[float], memory: int) -> str:
    """What one line of code captured: '7 graphs for 7 batch sizes · 300 replays · 30% padding ·
    36.0 MiB reserved while capturing' (`sizes`: the batch sizes its graphs were captured for)."""
    parts = [plural(graphs, "graph") + (f" for {plural(sizes, 'batch size')}" if sizes else ""),
             plural(replays, "replay"), padding_text(padding), f"{format_bytes(memory)} reserved while capturing"]
    return " · ".join(p for p in parts if p)


def size_label(batch: Optional[int], name: str) -> str:
    """'batch 16'; a graph captured for no size said is named ('graph 5')."""
    return name if batch is None else f"batch {batch}"


def size_facts(graphs: int, replays: int, never: int, padding: Optional[float], replay_us: Optional[float]) -> str:
    """The graphs of one batch size: '1 graph · 90 replays · 22% padding · 40 µs a replay', 'never
    replayed' where none of them was, '3 of 7 never replayed' where some were not (`never`: how many)."""
    if never == graphs:
        return " · ".join([plural(graphs, "graph"), "never replayed"])
    parts = [plural(graphs, "graph"), plural(replays, "replay"), padding_text(padding),
             "" if replay_us is None else f"{format_us(replay_us)} a replay",
             f"{never} of {graphs} never replayed" if never else ""]
    return " · ".join(p for p in parts if p)


def pool_facts(pool: int, graphs: int, memory: int, held: Optional[int]) -> str:
    """'pool 1 · shared by 7 graphs · 36.0 MiB reserved while capturing · 36.0 MiB held after its
    last capture' (`held`: where the pool was read, trace level "full"); one graph's: 'pool 2 · one graph'."""
    parts = [f"pool {pool}", f"shared by {plural(graphs, 'graph')}" if graphs > 1 else "one graph",
             f"{format_bytes(memory)} reserved while capturing",
             "" if held is None else f"{format_bytes(held)} held after its last capture"]
    return " · ".join(p for p in parts if p)


def tree_graph_line(name: str, node: int, replays: int) -> str:
    """A graph that is a node of an observed tree: 'graph 9: node 3 of the tree · 12 replays'."""
    return f"{name}: node {node} of the tree · {plural(replays, 'replay')}"
