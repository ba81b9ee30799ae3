"""The corpus of reported reduce-overhead surprises (examples/surprises), each recorded on a GPU
with `cgviz run` (torch 2.11, H200; scripts/record_surprises.py), as its user ran it and with its
fix (`--fixed`). For each, the doctor's first error or warning names the cause, the user's line
where there is one (found here by its text in the program, not by the doctor) and a fix that is
right for the case; on the fixed run that finding is gone.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import pytest

import cgviz
from cgviz.data import surprise_names, surprise_trace
from cgviz.trace.diagnose import finding_record
from helpers import ROOT

PROGRAMS = ROOT / "examples" / "surprises"


class Case(NamedTuple):
    kind: str  # the first error or warning finding's kind
    cause: str  # words of its cause
    line: Optional[str]  # text of the user's line it names (None: the finding names no line)
    fix: tuple[str, ...]  # words its fix must hold


CASES = {
    "activation_checkpointing": Case("raised", "freed while torch recorded it", None, ("use_reentrant=True",)),
    "chained_inference": Case("overwritten", "handed to the next compiled function", "logits = head(encoder(x))",
                              ("cudagraph_mark_step_begin()", "before the first compiled function")),
    "cpu_tensor": Case("partition", "DeviceCopy ops", "peak = peak.cpu().to(h.device)",
                       ("before or after the compiled function",)),
    "dynamic_graphs_skipped": Case("graphed", "cudagraph_skip_dynamic_graphs = True", "return (x @ weight).relu() * 2",
                                   ("cudagraph_skip_dynamic_graphs at False",)),
    "dynamic_padding": Case("graphed", "a new input shape", None, ("pad or bucket inputs",)),
    "dynamic_skip": Case("graphed", "a new input shape", None, ("pad or bucket inputs",)),
    "grad_accumulation": Case("overwritten", "gradient accumulation", "loss.backward()  # 2nd micro-batch",
                              ("cudagraph_mark_step_begin() once per optimizer step", "p.grad = torch.zeros_like(p)",
                               "zero_grad(set_to_none=False)")),
    "graph_break": Case("graph_break", "Tensor.item()", "if y.sum().item() > 0:", ("torch.where", "torch.cond")),
    "incompatible_op": Case("partition", "unbacked binding ops", "torch.nonzero(keep)",
                            ("output shape depends on the data",)),
    "loss_for_logging": Case("overwritten", "kept across calls", "torch.stack(losses)", ("clone",)),
    "mutated_input": Case("graphed", "mutated inputs", "k_cache.index_copy_(1, pos, k)",
                          ("torch._dynamo.mark_static_address",)),
    "partition_not_captured": Case("graphed", "left no part of the graph", None,
                                   ("cudagraph_skip_dynamic_graphs at False", "pad inputs")),
    "pending_backward": Case("graphed", "backward never runs", None, ("torch.no_grad()",)),
    "rerecord_every_step": Case("graphed", "a static input moved", None, ("copy_",)),
    "state_feedback": Case("overwritten", "fed back", "h = rnn_step(xs[t], h)", ("h = h.clone()",)),
    "warmup_inconsistency": Case("overwritten", "handed to the next compiled function", "y = consumer(x)",
                                 ("clone the output before handing it on",)),
}


def first_problem(trace) -> cgviz.trace.diagnose.Finding:
    return next(f for f in cgviz.diagnose(trace) if f.severity in ("error", "warning"))


def line_of(name: str, text: str) -> int:
    lines = (PROGRAMS / f"{name}.py").read_text().splitlines()
    (number,) = [i + 1 for i, line in enumerate(lines) if text in line and not line.lstrip().startswith(("#", "``"))]
    return number


def test_every_program_has_its_traces_and_its_case():
    programs = sorted(p.stem for p in PROGRAMS.glob("*.py"))
    assert len(programs) >= 12
    assert sorted(CASES) == programs
    assert surprise_names() == sorted(n for p in programs for n in (p, f"{p}-fixed"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_doctor_names_the_cause_the_line_and_the_fix(name):
    case = CASES[name]
    trace = surprise_trace(name)
    assert trace.meta["torch"].startswith("2.11")
    finding = first_problem(trace)
    record = finding_record(finding)
    assert finding.kind == case.kind, finding.text()
    assert case.cause in record["cause"], record["cause"]
    if case.line is None:
        assert record["source"] is None or record["source"]["file"].startswith("examples/surprises/")
    else:
        source = record["source"]
        assert source == {**source, "file": f"examples/surprises/{name}.py", "line": line_of(name, case.line)}, source
        assert f"{name}.py:{source['line']}" in finding.title
    for words in case.fix:
        assert words in finding.suggestion, finding.suggestion


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fixed_program_no_longer_has_the_problem(name):
    case = CASES[name]
    problems = [finding_record(f) for f in cgviz.diagnose(surprise_trace(f"{name}-fixed"))
                if f.severity in ("error", "warning")]
    assert not [p for p in problems if p["kind"] == case.kind and case.cause in p["cause"]], problems
    assert not [p for p in problems if p["severity"] == "error"], problems


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_program_says_where_it_was_reported_and_its_fix(name):
    text = (PROGRAMS / f"{name}.py").read_text()
    assert "--fixed" in text and "Fix (--fixed):" in text
    assert "https://github.com/" in text.split('"""')[1]


def test_the_docs_page_has_a_row_per_case_with_the_doctors_words():
    page = (ROOT / "docs" / "finds.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(rows) == len(CASES)
    for name in CASES:
        (row,) = [r for r in rows if r.startswith(f"| `{name}.py`")]
        url = next(w for w in (PROGRAMS / f"{name}.py").read_text().split() if w.startswith("https://github.com/"))
        assert url.rstrip(").,") in row
        finding = first_problem(surprise_trace(name))
        assert finding.title.replace("|", "\\|") in row and finding.suggestion.replace("|", "\\|") in row
    assert "docs/finds.md" in (ROOT / "README.md").read_text()
