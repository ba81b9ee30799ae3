"""Smoke test of the benchmarks: they run and print the JSON they promise (no timing assertions)."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers import ROOT

LEVELS = ("sim_trace_None", "sim_trace_events", "sim_trace_full")


def benchmark(name: str) -> Any:
    """A module of benchmarks/, imported as its scripts import each other (their folder first on
    sys.path while importing)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


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


def test_a_paired_ratio_says_how_sure_its_median_is():
    """The benchmarks' paired ratios carry a seeded bootstrap interval of the median: the same
    rounds give the same interval, it holds the median, and it is wider for scattered rounds."""
    paired = benchmark("_stats").paired
    steady = paired([1.01, 1.0, 1.02, 1.01, 1.0, 1.01, 1.02, 1.01], [1.0] * 8)
    scattered = paired([0.9, 1.1, 1.0, 1.2, 0.85, 1.05, 1.15, 0.95], [1.0] * 8)
    assert steady == paired([1.01, 1.0, 1.02, 1.01, 1.0, 1.01, 1.02, 1.01], [1.0] * 8)
    for result in (steady, scattered):
        low, high = result["ci95"]
        assert low <= result["median"] <= high
        assert len(result["per_round"]) == 8
    assert steady["ci95"][1] - steady["ci95"][0] < scattered["ci95"][1] - scattered["ci95"][0]
    assert steady["ci95"][0] >= 1.0 and steady["ci95"][1] <= 1.02


def test_interleaved_rounds_turn_the_order_and_stop_on_time():
    """Each round runs every variant once, the first one turning by one each round, with the
    garbage collector off inside a round; rounds stop at the count, or when the time is up."""
    import gc

    interleaved = benchmark("_stats").interleaved
    order: list[str] = []

    def run(name: str):
        def timed() -> float:
            order.append(name)
            assert not gc.isenabled()
            return float(len(order))
        return timed

    samples = interleaved({"a": run("a"), "b": run("b"), "c": run("c")}, 4, 60.0)
    assert order == list("abc" "bca" "cab" "abc")
    assert samples == {"a": [1.0, 6.0, 8.0, 10.0], "b": [2.0, 4.0, 9.0, 11.0], "c": [3.0, 5.0, 7.0, 12.0]}
    assert gc.isenabled()
    order.clear()
    assert interleaved({"a": run("a")}, 1000, 0.0) == {"a": [1.0]}  # a round started at once; no other


def test_ab_replay_imports_two_checkouts_side_by_side(tmp_path):
    """benchmarks/ab_replay.py times another checkout's Tree beside this one's, in one process:
    each cgviz is imported from its own folder, and trees of both run (on sim, here)."""
    other = tmp_path / "other"
    shutil.copytree(ROOT / "cgviz", other / "cgviz", ignore=shutil.ignore_patterns("__pycache__"))
    script = f"""
import json, sys, torch
sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
from ab_replay import load_cgviz
old = load_cgviz({str(other)!r})
old_tree = old.Tree("sim", trace=None)
new = load_cgviz({str(ROOT)!r})
new_tree = new.Tree("sim", trace=None)
replays = []
for tree in (old_tree, new_tree):
    f = tree.wrap(lambda x: x * 2, name="f")
    for _ in range(6):
        assert torch.equal(f(torch.ones(4)), torch.full((4,), 2.0))
    replays.append(tree.nodes[-1].replays)
print(json.dumps({{"files": [type(t)._call.__code__.co_filename for t in (old_tree, new_tree)], "replays": replays}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert Path(result["files"][0]) == other / "cgviz" / "engine" / "tree.py"
    assert Path(result["files"][1]) == ROOT / "cgviz" / "engine" / "tree.py"
    assert result["replays"] == [4, 4]


def test_class_switch_runs_from_anywhere_and_refuses_an_empty_run(tmp_path):
    script = str(ROOT / "benchmarks" / "class_switch.py")
    out = tmp_path / "class_switch.json"
    proc = subprocess.run([sys.executable, script, "--rounds", "3", "--chunk", "5", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == result
    assert (result["benchmark"], result["rounds"], result["chunk"]) == ("class_switch", 3, 5)
    assert set(result["ns_per_call"]["median"]) == {"never_switched", "switched_once", "class_wrapped"}
    assert set(result["ns_per_call"]["ratios"]) == {"switched_once_vs_never_switched", "class_wrapped_vs_never_switched"}
    refused = subprocess.run([sys.executable, script, "--rounds", "0"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--rounds and --chunk take a positive number" in refused.stderr


def test_observer_parts_refuses_what_it_cannot_do(tmp_path):
    """GPU-only: on this machine it must say why it cannot run, by name, and exit 2."""
    script = str(ROOT / "benchmarks" / "observer_parts.py")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)

    bad = run("--chunk", "0")
    assert bad.returncode == 2 and "--chunk and --rounds take a positive number" in bad.stderr
    counting = run("--count-calls")
    assert counting.returncode == 2
    if sys.version_info < (3, 12):
        assert "--count-calls needs Python 3.12 or later" in counting.stderr
    no_gpu = run()
    assert no_gpu.returncode == 2 and "needs a CUDA device" in no_gpu.stderr


def test_observer_parts_makes_one_part_of_full_free_inside_an_observation_and_puts_it_back():
    """--full-parts' variants observe at "full" with the outputs' reads made free (every output
    taken as dead), or the whole state read (a constant); each puts the part back at its end."""
    from tree_standins import CUDAGraphNode, Manager, liveness, snapshots

    from cgviz.observe import _hooks

    full_without = benchmark("observer_parts").full_without
    node = CUDAGraphNode("a")
    manager = Manager({"f": [node]}, current=node)
    tree = snapshots({}, manager)
    assert liveness(tree, manager) == [True]  # its output is held
    with full_without("reads"):
        assert [observer.level for observer in _hooks.ACTIVE] == ["full"]
        assert liveness(tree, manager) == [False]
    assert liveness(tree, manager) == [True] and not _hooks.ACTIVE
    with full_without("state"):
        assert tree.state(manager, set()) == ("steady",)
    assert tree.state(manager, set())[3] == (id(node), (0,))


def test_resnet_levels_times_making_the_noted_events_into_steps():
    """A training chunk's time counts the making of the events the observer noted into steps,
    which a long run pays every few thousand events: caught_up() makes every active observer's
    noted events into steps, and passes over a stand-in observer that has none."""
    from test_observe_releases import Function, Manager, Node

    from cgviz.observe import _hooks
    from cgviz.observe.observer import TorchObserver

    caught_up = benchmark("resnet_levels").caught_up
    manager, node = Manager(), Node(Function(0))
    observer = TorchObserver("events")
    observer.recorded(manager, Function(0), None, node, [], None, None)
    generation = observer.generation
    for _ in range(50):
        observer.replayed(manager, node)
        observer.generation_began(manager)
    assert len(observer.raw.events) == 100
    _hooks.ACTIVE.extend([observer, object()])
    try:
        caught_up()
    finally:
        del _hooks.ACTIVE[-2:]
    assert observer.raw.events == []
    assert (observer.replays[0], observer.generation) == (50, generation + 50)


def test_observer_parts_times_each_hook_in_place_and_puts_torchs_class_back(monkeypatch):
    """hook_times rebuilds each hook around a timed stand-in of the method it wraps, on the class
    the observer hooks, runs the loop under each context, and puts the class's hooks back; every
    method the loop called is reported, and the observer still sees the loop's replays."""
    import contextlib
    import functools

    import torch

    from cgviz.observe import _hooks
    from cgviz.observe import _torch_layout as layout
    from cgviz.observe.torch_compile import start_observing, stop_observing

    class Manager:
        def __init__(self) -> None:
            self.current_node, self.node = None, object()

        def _run(self, new_inputs, function_id):
            return self.execute_node(self.node, new_inputs)

        def execute_node(self, node, new_inputs):
            return new_inputs

    hooks = [("run", "_run", _hooks.wrap_run), ("execute", "execute_node", _hooks.wrap_execute)]
    for _, name, make in hooks:
        method = vars(Manager)[name]
        setattr(Manager, name, functools.update_wrapper(make(method), method, assigned=("__name__",), updated=()))
    installed = dict(vars(Manager))
    monkeypatch.setattr(layout, "manager_class", lambda: Manager)
    monkeypatch.setattr(_hooks, "manager_hooks", lambda cls: hooks)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # no device here: nothing to wait for
    hook_times = benchmark("observer_parts").hook_times
    manager, seen = Manager(), []

    @contextlib.contextmanager
    def observed():
        observer = start_observing("events")
        monkeypatch.setattr(observer, "replayed", lambda manager, node, start: seen.append(node))
        try:
            yield
        finally:
            stop_observing(observer)

    times = hook_times(lambda n: [manager._run([1], 0) for _ in range(n)],
                       {"no_observer": contextlib.nullcontext, "events": observed}, steps=10, repeats=2)
    assert dict(vars(Manager)) == installed
    for variant in ("clocks_alone", "no_observer", "events"):
        assert set(times[f"{variant}_us_per_step"]) - {"all"} == {"_run", "execute_node"}
    assert len(seen) == 2 * 12 and all(node is manager.node for node in seen)


def test_step_profile_share_counts_cgviz_s_own_samples_of_the_steady_steps(tmp_path):
    """`step_profile.py share` reads py-spy's raw stacks: only a steady step's samples count, and
    of them those whose innermost frame is cgviz's (a call into torch from cgviz's hook is
    torch's), by function and by line, against the main thread's steady samples. The backward's
    samples on autograd's device thread count too, but those of a call torch warms up."""
    raw = tmp_path / "full.txt"
    loop = "<module> (step_profile.py:150);main (step_profile.py:128);loop (step_profile.py:60);steady_steps (step_profile.py:41)"
    hook = "execute_node (cgviz/observe/_hooks.py:163)"
    backward = "thread (7);BackwardCFunction.apply (torch/autograd/function.py:317);run (cgviz/observe/_hooks.py:114)"
    raw.write_text("\n".join([
        f"{backward};watch_call (cgviz/observe/observer.py:285) 8",
        f"{backward};CUDAGraphNode.check_invariants (torch/_inductor/cudagraph_trees.py:1790) 30",
        f"{backward};CUDAGraphTreeManager.run_eager (torch/_inductor/cudagraph_trees.py:2400);"
        "warmed_up (cgviz/observe/observer.py:200) 50",  # torch warming the backward up: not a steady step
        f"{loop};train (resnet_levels.py:105);_engine_run_backward (torch/autograd/graph.py:841) 70",
        f"{loop};train (resnet_levels.py:104);{hook};replayed (cgviz/observe/replay_loop.py:82) 12",
        f"{loop};train (resnet_levels.py:104);{hook};replayed (cgviz/observe/replay_loop.py:85) 3",
        f"{loop};train (resnet_levels.py:104);{hook} 5",
        f"{loop};train (resnet_levels.py:104);{hook};execute_node (torch/_inductor/cudagraph_trees.py:2100) 10",
        "<module> (step_profile.py:150);main (step_profile.py:128);loop (step_profile.py:55);warm (resnet_levels.py:122);"
        "replayed (cgviz/observe/replay_loop.py:82) 400",  # warming up: not a steady step
        "not a stack line",
    ]) + "\n")
    out = tmp_path / "share.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "step_profile.py"), "share", str(raw), "--top", "2",
                           "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["full.txt"]
    assert result == json.loads(out.read_text())["full.txt"]
    assert result["steady_samples"] == 100 and result["backward_thread_samples"] == 38
    assert result["cgviz_percent"] == 28.0
    assert result["by_function"] == {"replayed (cgviz/observe/replay_loop.py)": 15.0,
                                     "watch_call (cgviz/observe/observer.py)": 8.0}
    assert result["by_line"] == {"replayed (cgviz/observe/replay_loop.py:82)": 12.0,
                                 "watch_call (cgviz/observe/observer.py:285)": 8.0}


def test_step_profile_refuses_what_it_cannot_do(tmp_path):
    """Without a steady step's samples, an unreadable file, a bad number or a CUDA device, it says
    which and exits 2."""
    script = str(ROOT / "benchmarks" / "step_profile.py")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)

    other = tmp_path / "other.txt"
    other.write_text("<module> (train.py:3);step (train.py:9) 40\n")
    no_steady = run("share", str(other))
    assert no_steady.returncode == 2 and "no sample is of a steady step" in no_steady.stderr
    missing = run("share", str(tmp_path / "absent.txt"))
    assert missing.returncode == 2 and "absent.txt" in missing.stderr
    assert run("share", str(other), "--top", "0").returncode == 2
    assert run("loop", "fast").returncode == 2
    bad_seconds = run("loop", "full", "--seconds", "0")
    assert bad_seconds.returncode == 2 and "--seconds takes a positive number" in bad_seconds.stderr
    import torch

    if not torch.cuda.is_available():
        no_gpu = run("loop", "events", "--seconds", "1")
        assert no_gpu.returncode == 2 and "needs a CUDA device" in no_gpu.stderr
