"""What the doctor finds: a `Finding` (one thing worth knowing about a run, with the steps it
rests on), a trace's `Diagnosis`, and a finding as `cgviz doctor --json` gives it. The modules of
findings (diagnose_*.py, ranks.py) build on these; this module imports none of them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterator

from cgviz.trace.units import plural


SEVERITIES = ("error", "warning", "info")
# the kinds of step that are a call of a function (the others: compile, generation, ...)
CALL_KINDS = ("warmup", "record", "execute", "eager", "error")


@dataclass
class Finding:
    """One thing worth knowing about a run, with the steps it rests on."""

    severity: str  # "error" | "warning" | "info"
    kind: str  # "graphed", "coverage", "eager", "rerecord", "overwritten", "pending_backward", "shapes",
    # "before_observing", "pool", "time", "graph_break", "compile_skip", "raised", "partition";
    # plain CUDA graphs (diagnose_graphs.py): "recapture", "graph_pool", "never_replayed", "padding"
    title: str
    evidence: list[int]  # indices of the stored steps it rests on, the first one to look at first
    numbers: dict = field(default_factory=dict)
    suggestion: str = ""

    def text(self) -> str:
        where = f" (step {self.evidence[0] + 1})" if self.evidence else ""  # counted from 1, as the explorer shows
        out = f"{self.severity}: {self.title}{where}"
        if self.suggestion:
            out += f"\n    fix: {self.suggestion}"
        return out


def finding_record(finding: Finding) -> dict:
    """A finding as `cgviz doctor --json` gives it: its fields, and the cause, the source
    location (or null) and the fix as fields of their own."""
    record = asdict(finding)
    numbers = finding.numbers
    record["cause"] = numbers.get("cause") if isinstance(numbers.get("cause"), str) else finding.title
    source = numbers.get("source")
    record["source"] = source if isinstance(source, dict) else None
    record["fix"] = finding.suggestion or None
    return record


@dataclass
class Diagnosis:
    """The findings of one trace, the most important first."""

    findings: list[Finding]
    graphs: int = 0  # CUDA graphs made outside the trees that the trace holds

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def text(self) -> str:
        if not self.findings:
            if self.graphs:
                return f"no findings: nothing looks wrong with the {plural(self.graphs, 'CUDA graph')} of the trace"
            return "no findings: nothing was called through a tree"
        return "\n".join(f.text() for f in self.findings)

    def to_dict(self) -> dict:
        return {"findings": [finding_record(f) for f in self.findings]}
