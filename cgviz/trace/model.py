"""The Trace: the one data model between engines/observers and views.

Everything here is plain data (dataclasses of ints, strings and lists) so that a
trace recorded on a GPU machine round-trips through JSON and opens anywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal, Optional, Union

from cgviz.trace import words

SCHEMA_VERSION = 2


def safe_text(s: str) -> str:
    """`s` with each lone surrogate written as its escape text (the six characters `\\udcff`).

    Text from user code (an exception message, a function name from undecodable bytes) can
    hold lone surrogates, which UTF-8 cannot encode, so a trace or page holding one could not
    be written. The escape keeps the rest of the text and shows where the bad character was.
    """
    if s.isascii():
        return s
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


StepKind = Literal[
    "warmup", "record", "execute", "eager", "generation", "path_end", "checkpoint_restore", "error", "compile",
    "capture", "replay", "destroy",
]
STEP_KINDS: tuple[str, ...] = (
    "warmup", "record", "execute", "eager", "generation", "path_end", "checkpoint_restore", "error", "compile",
    "capture", "replay", "destroy",
)
#: The kinds of a CUDA graph made outside torch.compile's trees (`cgviz.observe_graphs`): its
#: capture, each replay, its destruction. Such steps name their graph (`Step.graph`), no node.
GRAPH_STEP_KINDS: tuple[str, ...] = ("capture", "replay", "destroy")
OutputState = Literal["live", "dead", "invalid"]
NodeKind = Literal["warmup", "graph"]
PathState = Literal["none", "warmup", "recording", "execution"]


@dataclass
class OutputView:
    """One output of a node, as of its latest run."""

    index: int
    shape: list[int]
    dtype: str
    nbytes: int
    address: Optional[int]
    state: OutputState
    alias_of: Optional[str] = None  # "input 0", "output 1", "external" or None (own pool memory)
    values: Optional[dict] = None  # Tree(values=True): head, min, max, mean, nan, inf after the run

    @property
    def described(self) -> bool:
        """Whether its shape, dtype and size were recorded (torch keeps none for warmup outputs)."""
        return bool(self.dtype)


@dataclass
class NodeView:
    """A node of the tree: a warmup run or a recorded graph."""

    id: int
    function: str
    kind: NodeKind
    parent: Optional[int]
    children: list[int]
    generation: int
    replays: int
    outputs: list[OutputView]
    signature: str = ""


@dataclass
class Block:
    """A block of a pool segment; `node`/`output` name the node output that owns it, if any."""

    address: int
    size: int
    allocated: bool
    requested: int = 0
    owner: Optional[str] = None  # plain words: "node 3 output 0", "node 3 input 1", ...
    node: Optional[int] = None
    output: Optional[int] = None


@dataclass
class Segment:
    address: int
    size: int
    kind: str
    blocks: list[Block]


@dataclass
class Snapshot:
    """The whole tree after a step."""

    nodes: list[NodeView]
    current_node: Optional[int]
    path: list[int]
    state: PathState
    generation: int
    segments: list[Segment] = field(default_factory=list)

    @property
    def reserved_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def allocated_bytes(self) -> int:
        return sum(b.size for s in self.segments for b in s.blocks if b.allocated)

    def node(self, node_id: int) -> NodeView:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(f"no node {node_id} in this snapshot")


@dataclass(slots=True)
class Step:
    """One decision of the tree, with the reason for it in plain words.

    Repeated work is stored once: `repeat` > 1 with `span` k means the k steps ending
    here (this one and the k-1 before it) happened `repeat` times in a row, identically
    but for their generation numbers (a replay loop: path_end, execute, execute, ...).
    Those steps keep their first occurrence's generation, the snapshot of the latest,
    and the total duration.

    `start` is the wall-clock time the decision began, in seconds since the Unix epoch
    (`time.time()`, the clock of torch's profiler), so steps can be placed on a timeline
    beside a profiler trace; None where it was not measured (traces saved before it
    existed, replays torch.compile's observer notes without a clock). A folded block's
    steps keep the start of their first occurrence.

    `rank` is None but in a trace of several ranks merged into one (`cgviz.merge`): there, it is
    the rank whose tree made the decision, and node ids, generations and the snapshot are that
    rank's ((rank, node) names a node).

    `graph` is None but in a step of a CUDA graph made outside torch.compile's trees
    (`cgviz.observe_graphs`; kinds GRAPH_STEP_KINDS): there, it is the graph's id in
    `Trace.graphs`, and `node`, `parent` and the snapshot say nothing (its generation is the
    trees' at that moment).

    `device` is None but where one process ran trees on several devices (torch keeps a manager
    per device; `observe_torch` then names each step's): there, it is the device whose tree made
    the decision ("cuda:1"), and the snapshot is that device's tree. Node ids stay unique across
    the devices of one process.
    """

    index: int
    kind: StepKind
    reason: str
    generation: int
    function: Optional[str] = None
    node: Optional[int] = None
    parent: Optional[int] = None
    duration: float = 0.0
    repeat: int = 1
    span: int = 1
    invalidated: list[list[int]] = field(default_factory=list)  # [node, output] pairs
    snapshot: Optional[Snapshot] = None
    start: Optional[float] = None  # seconds since the Unix epoch; last, so positional use is unchanged
    rank: Optional[int] = None  # the rank whose tree decided, in a merged multi-rank trace (cgviz.merge)
    device: Optional[str] = None  # the device whose tree decided, where one process ran trees on several
    graph: Optional[int] = None  # the CUDA graph (`Trace.graphs`) a capture, replay or destroy step is about; last

    @property
    def of_graph(self) -> bool:
        """Is this a step of a CUDA graph made outside the trees (capture, replay, destroy)?"""
        return self.graph is not None

    def headline(self) -> str:
        """A one-line description: 'record g → node 3 · generation 2' (`trace.words.headline`)."""
        return words.headline(self)


@dataclass
class GraphView:
    """A CUDA graph captured outside torch.compile's trees, or one of a tree's own graphs where
    both were observed (`node` then links it to its tree node, and its replays are the tree's
    execute steps): what `cgviz.observe_graphs` learnt of it by the end of the trace.

    `pool` and `stream` number the memory pools and capture streams in the order they were
    first seen (a pool several graphs capture into is shared); `site` is the user's line that
    captured it; `batch` the size it was captured for and `used`/`padded` the rows in use and
    replayed, where the caller said so (`cgviz.graph_batch`).
    """

    id: int
    site: str
    origin: str  # "torch.cuda.graph", "make_graphed_callables", "CUDAGraph", "torch.compile"
    device: str
    stream: int
    pool: int
    memory: int = 0  # bytes the device's reserved memory grew by while it captured
    pool_bytes: Optional[int] = None  # bytes its pool held after its capture (trace level "full")
    kernels: Optional[list[list]] = None  # [[kernel name, count], ...] where they were read
    batch: Optional[int] = None
    node: Optional[int] = None  # the tree node it is, where torch.compile's trees were observed too
    replays: int = 0
    used: int = 0  # rows in use over the replays whose caller said so
    padded: int = 0  # rows replayed (padding included) over those replays
    replay_us: Optional[float] = None  # median replay time on the GPU, where replays were timed
    capture_ms: float = 0.0  # how long its capture took on the host
    destroyed: bool = False
    label: str = ""  # the name the caller gave (cgviz.graph_batch(label=...))

    @property
    def name(self) -> str:
        """'graph 3', or 'graph 3 (decode)' with the caller's label."""
        return f"graph {self.id}" + (f" ({self.label})" if self.label else "")


@dataclass
class Trace:
    """A sequence of steps, and what produced them (`meta`: backend, device, versions);
    `graphs`: the CUDA graphs made outside the trees that its steps name."""

    steps: list[Step] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    graphs: list[GraphView] = field(default_factory=list)

    def graph(self, graph_id: int) -> GraphView:
        for g in self.graphs:
            if g.id == graph_id:
                return g
        raise KeyError(f"no graph {graph_id} in this trace")

    def __len__(self) -> int:
        return len(self.steps)

    def repeats(self) -> list[int]:
        """How many times each stored step happened (blocks counted for each of their steps). The
        span of a step that is not repeated means nothing, as in `expanded`: reading it would
        also cost steps × span on a trace whose every step names a long span."""
        times = [1] * len(self.steps)
        for end, step in enumerate(self.steps):
            if step.repeat == 1:
                continue
            for k in range(end - step.span + 1, end + 1):
                times[k] = step.repeat
        return times

    def expanded(self) -> list[Step]:
        """Every decision in order, repeated blocks unrolled (the same Step objects again)."""
        out: list[Step] = []
        for step in self.steps:
            out.append(step)
            if step.repeat > 1:
                out.extend(out[-step.span :] * (step.repeat - 1))
        return out

    @property
    def calls(self) -> int:
        """Number of decisions the steps stand for, counting repeats."""
        return sum(self.repeats())

    def counts(self) -> dict[str, int]:
        """How many steps of each kind (repeats counted)."""
        out = {k: 0 for k in STEP_KINDS}
        for step, times in zip(self.steps, self.repeats()):
            out[step.kind] += times
        return out

    def last_snapshot(self) -> Optional[Snapshot]:
        for s in reversed(self.steps):
            if s.snapshot is not None:
                return s.snapshot
        return None

    def to_chrome_trace(self, profiler_trace: Union[None, dict, str, os.PathLike] = None, *,
                        folded: str = "expand", max_slices: Optional[int] = None) -> dict:
        """The steps as a Chrome Trace Event Format object, to open in ui.perfetto.dev or
        chrome://tracing; with `profiler_trace` (a torch profiler trace: its dict or its path),
        merged into it on the profiler's clock. `folded` ("expand" or "collapse") and
        `max_slices`: how folded repeats are drawn. See cgviz/trace/chrome_trace.py."""
        from cgviz.trace.chrome_trace import MAX_SLICES, to_chrome_trace

        return to_chrome_trace(self, profiler_trace, folded=folded,
                               max_slices=MAX_SLICES if max_slices is None else max_slices)

    def save(self, path) -> None:
        from cgviz.trace.io import save_trace

        save_trace(self, path)

    @classmethod
    def load(cls, path) -> "Trace":
        from cgviz.trace.io import load_trace

        return load_trace(path)


def require_trace(value: object, caller: str) -> Trace:
    """`value`, a Trace; anything else is a TypeError saying what `caller` needs and how to get
    it (a path is not loaded, a tree's trace is not taken), not an AttributeError from inside."""
    if isinstance(value, Trace):
        return value
    hint = ""
    if isinstance(value, (str, bytes, os.PathLike)):
        hint = ": load the file first (cgviz.Trace.load(path))"
    elif isinstance(getattr(value, "trace", None), Trace):
        hint = ": pass its .trace"
    raise TypeError(f"{caller} needs a cgviz.Trace, not {type(value).__name__}{hint}")
