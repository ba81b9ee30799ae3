"""`cgviz doctor --json`: each finding carries its cause, the source location (or null) and the
fix as fields of their own, for a program to read without parsing sentences."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import torch

import cgviz
from cgviz.data import torch_trace


def host_read(x):
    if (x * 2).sum().item() > 0:
        return x + 1
    return x


def test_an_engine_finding_names_the_users_line_as_a_field(tmp_path):
    tree = cgviz.Tree("sim")
    f = tree.wrap(host_read, name="host_read")
    for _ in range(3):
        f(torch.ones(4))
    path = tmp_path / "t.cgtrace.json"
    tree.trace.save(path)
    done = subprocess.run([sys.executable, "-m", "cgviz", "doctor", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    eager = next(f for f in json.loads(done.stdout)["findings"] if f["kind"] == "eager")
    lines, first = inspect.getsourcelines(host_read)
    assert eager["source"]["file"].endswith("test_doctor_json.py")
    assert eager["source"]["line"] == first + 1 and eager["source"]["function"] == "host_read"
    assert ".item()" in eager["source"]["code"]
    assert "copies device memory to the host" in eager["cause"]
    assert ".item()" in eager["fix"]


def test_a_torch_skip_finding_carries_torchs_cause_and_source():
    findings = cgviz.diagnose(torch_trace("torch_cpu_input")).to_dict()["findings"]
    skip = next(f for f in findings if f["kind"] == "eager")
    assert "cpu device" in skip["cause"]
    assert skip["source"] is not None and skip["source"]["line"] > 0
    assert "GPU" in skip["fix"]


def test_every_finding_has_the_three_fields():
    for name in ("torch_training", "torch_overwritten", "torch_dynamic_shapes"):
        for finding in cgviz.diagnose(torch_trace(name)).to_dict()["findings"]:
            assert {"cause", "source", "fix"} <= finding.keys()
            assert isinstance(finding["cause"], str) and finding["cause"]
            assert finding["source"] is None or {"file", "line"} <= finding["source"].keys()
