"""Smoke test of the benchmarks: they run and print the JSON they promise (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import ROOT

LEVELS = ("sim_trace_None", "sim_trace_events", "sim_trace_full")


def test_sim_overhead_quick(tmp_path):
    out = tmp_path / "sim_overhead.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sim_overhead.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # the script must find this checkout's cgviz by itself
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == result

    assert result["benchmark"] == "sim_overhead"
    assert result["quick"] is True
    assert result["calls"] > 0 and result["repeats"] > 0
    for key in ("python", "torch", "cgviz", "platform", "cpu_count"):
        assert result["environment"][key], key
    assert set(result["workloads"]) >= {"small"}
    for name, w in result["workloads"].items():
        assert w["description"], name
        assert set(w["per_call_us"]) == {"eager", *LEVELS}, name
        for variant, us in w["per_call_us"].items():
            assert isinstance(us, (int, float)) and us > 0, (name, variant, us)
        assert set(w["ratio_vs_eager"]) == set(LEVELS), name
        assert all(r > 0 for r in w["ratio_vs_eager"].values()), name
        assert set(w["ratio_vs_trace_None"]) == {"sim_trace_events", "sim_trace_full"}, name
        assert all(r > 0 for r in w["ratio_vs_trace_None"].values()), name
        assert all(n > 0 for n in w["calls_per_repeat"].values()), name


def test_diagnose_benchmark_quick(tmp_path):
    out = tmp_path / "diagnose.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "diagnose.py"), "--nodes", "20", "--steps", "200", "--repeats", "2",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == result
    assert result["benchmark"] == "diagnose" and result["trace"]["steps"] == 200
    for level in ("full", "events"):
        # a time is a measurement, not a behaviour: it is a number, never asserted to exceed anything
        assert isinstance(result[level]["median_s"], float) and result[level]["median_s"] >= 0
        assert result[level]["findings"] > 0
    assert "pool" in result["full"]["kinds"] and "pool" not in result["events"]["kinds"]
