"""A trace file from someone else is safe to open: special files, huge files, values of the wrong
type, absurd repeat counts and terminal escapes are refused or shown harmlessly, within a time
and memory limit, and no command writes over one of its own inputs.

Commands run as `python -m cgviz ...` in a process of their own, under a memory limit (RLIMIT_AS)
and a timeout that only a hang exceeds: a command that blocks or reads without end fails its test
instead of stalling the suite or the machine."""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cgviz import cli
from cgviz.cli import main
from cgviz.trace.io import TraceFormatError, load_trace, to_dict
from test_trace_io import hand_trace, write_json
from test_trace_robustness import make_socket as bound_socket

ROOT = Path(__file__).resolve().parent.parent
MEMORY = 1536 << 20  # bytes of address space a command may use: far below what reading without end takes
CPU_BUILD_START = 640 << 20  # what `python -m cgviz` maps before reading anything, with a CPU build of torch
TIMEOUT = 60  # seconds: generous for any command here; only a hang reaches it
POSIX = os.name == "posix"
LINUX = sys.platform.startswith("linux")


@functools.lru_cache(maxsize=None)
def memory_limit() -> int:
    """MEMORY, plus what a CUDA build of torch maps beyond a CPU build at import (about 2.5 GB of
    libraries; measured on Linux as a child's VmPeak after importing the CLI)."""
    if not LINUX:
        return MEMORY
    probe = "import cgviz.cli, cgviz.scenarios; print(open('/proc/self/status').read())"
    status = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=TIMEOUT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    peak = next((int(line.split()[1]) << 10 for line in status.splitlines() if line.startswith("VmPeak:")), 0)
    return MEMORY + max(0, peak - CPU_BUILD_START)


def memory_limiter():
    """The preexec_fn that sets memory_limit() in a command's process (None off POSIX)."""
    if not POSIX:
        return None
    limit = memory_limit()

    def limit_memory() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit_memory


def cgviz(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m cgviz ARGS` in a process of its own, with the memory limit (on POSIX)."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               "PYTHONIOENCODING": "utf-8", **(env or {})}
    return subprocess.run([sys.executable, "-m", "cgviz", *map(str, args)], capture_output=True, text=True,
                          encoding="utf-8", errors="replace", timeout=TIMEOUT, env=environ,
                          preexec_fn=memory_limiter())


LOAD = """
import sys
from cgviz import Trace
try:
    trace = Trace.load(sys.argv[1])
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")
    sys.exit(1)
print(f"loaded {len(trace.steps)} steps")
"""


def load_in_process_of_its_own(path, env: dict | None = None) -> subprocess.CompletedProcess:
    """`Trace.load(path)` in a process of its own (memory limit, timeout): prints the error's
    type and message, or 'loaded N steps'."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               **(env or {})}
    return subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=TIMEOUT, env=environ, preexec_fn=memory_limiter())


def refused(result: subprocess.CompletedProcess, *expected: str) -> str:
    """A command that ended with a clear one-line error holding `expected`, not a traceback."""
    err = result.stderr
    assert result.returncode == 1, (result.returncode, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-2000:]
    for part in expected:
        assert part in lines[0], lines[0]
    return lines[0]


def timed_trace(tmp_path: Path, name: str = "t.json") -> Path:
    """hand_trace with a start time on every step (so it merges into a profiler trace)."""
    data = to_dict(hand_trace())
    for i, step in enumerate(data["steps"]):
        step["start"] = 1_700_000_000.0 + i
    return write_json(tmp_path / name, data)


# -- special files: refused, never read --------------------------------------------------------------
def make_fifo(tmp_path: Path) -> tuple[str, str]:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this OS")
    path = tmp_path / "fifo.json"
    os.mkfifo(path)
    return str(path), "a FIFO"


def dev_zero(tmp_path: Path) -> tuple[str, str]:
    if not LINUX or not os.path.exists("/dev/zero"):
        pytest.skip("/dev/zero is a Linux file")
    return "/dev/zero", "a character device"


def make_socket(tmp_path: Path) -> tuple[str, str]:
    if not hasattr(socket, "AF_UNIX"):
        pytest.skip("no Unix sockets on this OS")
    path = tmp_path / "sock.json"
    return str(path), bound_socket(path)


def make_directory(tmp_path: Path) -> tuple[str, str]:
    path = tmp_path / "dir.json"
    path.mkdir()
    return str(path), "a directory"


SPECIAL = {"fifo": make_fifo, "dev-zero": dev_zero, "socket": make_socket, "directory": make_directory}


def commands(special: str, tmp_path: Path) -> dict[str, list]:
    """Every command that reads a user's file, reading `special` where it is given as a file."""
    good = timed_trace(tmp_path)
    return {
        "info": ["info", special],
        "doctor": ["doctor", special],
        "render": ["render", special, "-o", tmp_path / "out.html"],
        "export": ["export", special, "-o", tmp_path / "out.perfetto.json"],
        "merge": ["merge", good, special, "-o", tmp_path / "all.cgtrace.json"],
        "export --merge": ["export", good, "--merge", special, "-o", tmp_path / "out.perfetto.json"],
    }


COMMANDS = ["info", "doctor", "render", "export", "merge", "export --merge"]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("special", sorted(SPECIAL))
def test_a_special_file_is_refused_naming_what_it_is(tmp_path, special, command):
    path, what = SPECIAL[special](tmp_path)
    result = cgviz(*commands(path, tmp_path)[command])
    refused(result, path, f"it is {what}")
    assert not any(p.name.startswith("out") or p.name.startswith("all") for p in tmp_path.iterdir())


@pytest.mark.parametrize("special", sorted(SPECIAL))
def test_trace_load_refuses_a_special_file(tmp_path, special):
    path, what = SPECIAL[special](tmp_path)
    result = load_in_process_of_its_own(path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{path}: it is {what}" in result.stdout, result.stdout + result.stderr


def test_a_fifo_with_a_writer_is_still_refused_unread(tmp_path):
    """A FIFO someone writes into is refused as well: nothing is read from it."""
    path, _ = make_fifo(tmp_path)
    writer = subprocess.Popen([sys.executable, "-c", f"open({path!r}, 'w').write('{{}}' * 1000)"])
    try:
        refused(cgviz("info", path), path, "it is a FIFO, not a regular file")
    finally:
        writer.kill()
        writer.wait(TIMEOUT)


# -- size: checked before reading, and while reading -------------------------------------------------
def test_a_trace_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    """A 4 GiB file (sparse: it takes no room) is refused at once, whatever it holds."""
    path = tmp_path / "huge.cgtrace.json"
    with open(path, "wb") as fh:
        fh.truncate(4 << 30)
    if os.stat(path).st_blocks * 512 > 1 << 20:
        pytest.skip("this file system does not keep sparse files")
    for command in ("info", "render"):
        refused(cgviz(command, path), str(path), "too large", "4096 MiB", "CGVIZ_MAX_FILE_MB")
    result = load_in_process_of_its_own(path)
    assert result.stdout.startswith(f"TraceFormatError: {path}: too large"), result.stdout + result.stderr


def test_the_size_limit_can_be_set_and_holds_for_the_profiler_trace_too(tmp_path):
    data = to_dict(hand_trace())
    data["steps"][4]["reason"] = "x" * (2 << 20)
    trace = write_json(tmp_path / "t.json", data)
    small = {"CGVIZ_MAX_FILE_MB": "1"}
    refused(cgviz("info", trace, env=small), str(trace), "too large", "more than the limit of 1 MiB")
    profiler = tmp_path / "profile.json"
    profiler.write_text(json.dumps({"traceEvents": [{"ph": "i", "ts": 0, "name": "x" * (2 << 20)}]}))
    good = timed_trace(tmp_path, "good.json")
    refused(cgviz("export", good, "--merge", profiler, "-o", tmp_path / "o.json", env=small), str(profiler),
            "too large")
    assert cgviz("info", trace).returncode == 0  # under the default limit


def test_a_gzipped_profiler_trace_is_limited_by_what_it_decompresses_to(tmp_path):
    import gzip

    profiler = tmp_path / "profile.json.gz"
    profiler.write_bytes(gzip.compress(b" " * (3 << 20) + b'{"traceEvents": []}'))  # 3 MiB in a few KiB
    good = timed_trace(tmp_path, "good.json")
    refused(cgviz("export", good, "--merge", profiler, "-o", tmp_path / "o.json", env={"CGVIZ_MAX_FILE_MB": "1"}),
            str(profiler), "decompresses to more than the limit of 1 MiB")
    assert cgviz("export", good, "--merge", profiler, "-o", tmp_path / "o.json").returncode == 0


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc")
def test_a_file_yielding_more_than_its_size_is_cut_at_the_limit():
    """/proc/self/smaps is a regular file whose size reads as 0 and that yields far more: the read
    stops at the limit, as for a file that grows while it is read."""
    result = load_in_process_of_its_own("/proc/self/smaps", env={"CGVIZ_MAX_FILE_MB": "0.01"})
    assert result.returncode == 1
    assert "/proc/self/smaps: grew past the limit of 0.01 MiB while being read" in result.stdout, result.stdout


def test_a_50_mb_string_loads_within_the_limits(tmp_path):
    data = to_dict(hand_trace())
    data["steps"][4]["reason"] = "r" * 50_000_000
    data["steps"][4]["function"] = "f" * 50_000_000
    path = write_json(tmp_path / "t.json", data)
    assert load_in_process_of_its_own(path).stdout.strip() == "loaded 5 steps"
    for command in (["info", path], ["doctor", path]):
        result = cgviz(*command)
        assert result.returncode == 0, result.stderr[-2000:]


# -- meta: checked like every other field ---------------------------------------------------------------
PROFILE_ENTRY = {"function": "g", "kind": "graph", "kernels": [["gemm", 2]], "replay_us": 12.5, "replays_timed": 3,
                 "eager_us": 40.0, "eager_runs_timed": 2, "eager_is_first_call": False, "clock": "CUDA events"}


def with_meta(**meta) -> dict:
    data = to_dict(hand_trace())
    data["meta"].update(meta)
    return data


def with_output_values(values) -> dict:
    data = to_dict(hand_trace())
    data["tables"]["outputs"][0]["values"] = values
    return data


def with_step_device(device) -> dict:
    data = to_dict(hand_trace())
    data["steps"][1]["device"] = device
    return data


BAD = {
    "profile-1": (with_meta(profile=1), "meta: field 'profile' must be an object"),
    "profile-entry-list": (with_meta(profile={"1": [1]}), "meta profile entry \"1\": must be an object, not an array"),
    "kernels-string": (with_meta(profile={"1": {**PROFILE_ENTRY, "kernels": "x"}}),
                       "meta profile entry \"1\": field 'kernels' must be null or an array"),
    "kernel-pair": (with_meta(profile={"1": {**PROFILE_ENTRY, "kernels": [["gemm"]]}}),
                    "meta profile entry \"1\": field 'kernels[0]' must be a [kernel name, count] pair"),
    "replay-string": (with_meta(profile={"1": {**PROFILE_ENTRY, "replay_us": "12"}}),
                      "meta profile entry \"1\": field 'replay_us' must be null or a number of microseconds"),
    "eager-negative": (with_meta(profile={"1": {**PROFILE_ENTRY, "eager_us": -1}}),
                       "field 'eager_us' must be null or a number of microseconds, 0 or more"),
    "replays-timed": (with_meta(profile={"1": {**PROFILE_ENTRY, "replays_timed": 1.5}}),
                      "field 'replays_timed' must be a count"),
    "first-call": (with_meta(profile={"1": {**PROFILE_ENTRY, "eager_is_first_call": "no"}}),
                   "field 'eager_is_first_call' must be true or false"),
    "ranks-1": (with_meta(ranks=1), "meta: field 'ranks' must be an array of objects"),
    "rank-meta-int": (with_meta(ranks=[{"rank": 0}, 1]), "meta ranks[1]: must be an object"),
    "rank-not-count": (with_meta(ranks=[{"rank": [0]}]), "meta ranks[0]: field 'rank' must be a count"),
    "rank-profile": (with_meta(ranks=[{"rank": 0, "profile": {"1": {**PROFILE_ENTRY, "replay_us": "x"}}}]),
                     "meta ranks[0] profile entry \"1\": field 'replay_us'"),
    "compiled-before": (with_meta(compiled_before_observing=[1]),
                        "meta: field 'compiled_before_observing[0]' must be a string"),
    "compiled-before-string": (with_meta(compiled_before_observing="f"),
                               "meta: field 'compiled_before_observing' must be an array of strings"),
    "devices": (with_meta(devices="cuda:0"), "meta: field 'devices' must be an array of strings"),
    "world-size": (with_meta(world_size="2"), "meta: field 'world_size' must be a positive count"),
    "skips": (with_meta(cudagraph_skips_before_observing=[1]),
              "meta: field 'cudagraph_skips_before_observing' must be a count"),
    "values-n": (with_output_values({"n": "x", "head": [1.0]}),
                 "step 0 snapshot node 0 output 0: field 'values.n' must be a count"),
    "values-head": (with_output_values({"n": 4, "head": 3}),
                    "step 0 snapshot node 0 output 0: field 'values.head' must be an array"),
    "values-min": (with_output_values({"n": 4, "head": [1], "min": [1]}),
                   "step 0 snapshot node 0 output 0: field 'values.min' must be a number"),
    "device-words": (with_step_device("cuda 0"),
                     "step 1: field 'device' must name a device as torch does, like 'cuda:1' (got 'cuda 0')"),
    "device-long": (with_step_device("cuda" * 100_000),
                    f"(got {('cuda' * 10)!r}… (400,000 characters))"),
    "device-index": (with_step_device("cuda:" + "9" * 7), "field 'device' must name a device as torch does"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_meta_and_output_values_of_the_wrong_type_are_refused_on_load(tmp_path, case):
    data, expected = BAD[case]
    path = write_json(tmp_path / "t.json", data)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}: "), str(info.value)
    assert expected in str(info.value), str(info.value)
    assert len(str(info.value)) < len(str(path)) + 300, "a refused value is shown shortened"


@pytest.mark.parametrize("command", ["render", "doctor", "info", "export"])
@pytest.mark.parametrize("case", ["profile-1", "kernels-string", "replay-string", "ranks-1", "compiled-before",
                                  "values-head"])
def test_commands_refuse_wrong_types_in_one_line(tmp_path, capsys, case, command):
    data, expected = BAD[case]
    path = write_json(tmp_path / "t.json", data)
    out = ["-o", str(tmp_path / "out.html" if command == "render" else tmp_path / "out.perfetto.json")]
    assert main([command, str(path), *(out if command in ("render", "export") else [])]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"cgviz {command}: {path}: ") and expected in err and "\n" not in err, err


def test_meta_as_cgviz_writes_it_loads(tmp_path):
    values = {"n": 32, "head": [0.5, -1.0, 2, True], "min": -1.0, "max": 2.0, "mean": 0.25, "nan": 0, "inf": 0}
    data = with_output_values(values)
    rank = {"rank": 0, "world_size": 2, "local_rank": 0, "device": "cuda:0 (NVIDIA H100)",
            "profile": {"1": PROFILE_ENTRY, "2": {"function": "h", "kind": "graph", "kernels": None}}}
    data["meta"].update(profile={"1": PROFILE_ENTRY, "0": {**PROFILE_ENTRY, "kind": "warmup", "replay_us": None}},
                        ranks=[rank, {**rank, "rank": 1}], world_size=2, devices=["cuda:0", "cuda:1"],
                        compiled_before_observing=["f [0/0] (forward)"], cudagraph_skips_before_observing=3,
                        cuda=None, own={"anything": [1, "x"]})
    trace = load_trace(write_json(tmp_path / "t.json", data))
    assert trace.meta["profile"]["1"] == PROFILE_ENTRY
    assert trace.steps[0].snapshot.nodes[0].outputs[0].values == values


# -- repeats: never unrolled --------------------------------------------------------------------------
def huge_repeat(tmp_path: Path, name: str, rank: int | None = None, device: bool = False) -> Path:
    data = to_dict(hand_trace())
    data["steps"][2]["repeat"] = 10**12
    if rank is not None:
        data["meta"]["rank"] = rank
    if device:
        for i, step in enumerate(data["steps"]):
            step["device"] = f"cuda:{i % 2}"
    return write_json(tmp_path / name, data)


CALLS = 10**12 + 4  # hand_trace: 5 steps, one of them repeated 10**12 times


@pytest.mark.parametrize("device", [False, True], ids=["one-device", "two-devices"])
def test_a_huge_repeat_is_counted_not_unrolled(tmp_path, device):
    path = huge_repeat(tmp_path, "t.json", device=device)
    info = cgviz("info", path)
    assert info.returncode == 0, info.stderr[-2000:]
    assert f"({CALLS} calls)" in info.stdout
    if device:
        assert f"cuda:0: {CALLS - 2} calls" in info.stdout, info.stdout
    for command in (["doctor", path], ["render", path, "-o", tmp_path / "t.html"],
                    ["export", path, "-o", tmp_path / "t.perfetto.json"]):
        result = cgviz(*command)
        assert result.returncode == 0, (command, result.stderr[-2000:])


def test_merging_huge_repeats_and_a_huge_world_size(tmp_path):
    a, b = huge_repeat(tmp_path, "r0.json", rank=0), huge_repeat(tmp_path, "r1.json", rank=1)
    for path in (a, b):
        data = json.loads(path.read_text())
        data["meta"]["world_size"] = 10**12
        write_json(path, data)
    merged = tmp_path / "all.json"
    result = cgviz("merge", a, b, "-o", merged)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "no trace of ranks 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 and 999,999,999,988 more among them" in result.stderr, \
        result.stderr
    info = cgviz("info", merged)
    assert info.returncode == 0 and f"rank 1: 5 steps ({CALLS} calls)" in info.stdout, info.stdout + info.stderr


# -- a profiler trace with NaN or Infinity -------------------------------------------------------------
def strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"{name} in the output: not JSON")

    return json.loads(text, parse_constant=refuse)


def test_export_merge_writes_valid_json_whatever_numbers_the_profiler_trace_holds(tmp_path):
    trace = timed_trace(tmp_path)
    profiler = tmp_path / "profile.json"
    profiler.write_text('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "dur": NaN}, '
                        '{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": Infinity, "dur": -Infinity, '
                        '"args": {"big": 1e999, "ok": 2.5}}], "baseTimeNanoseconds": 1700000000000000000}')
    out = tmp_path / "merged.json"
    result = cgviz("export", trace, "--merge", profiler, "-o", out)
    assert result.returncode == 0, result.stderr[-2000:]
    data = strict_json(out.read_text())
    a, b = data["traceEvents"][:2]
    assert a["dur"] is None and b["ts"] is None and b["dur"] is None and b["args"] == {"big": None, "ok": 2.5}
    assert "4 numbers" in result.stderr and "written as null" in result.stderr, result.stderr


def test_an_export_whose_times_overflow_is_still_valid_json(tmp_path):
    data = to_dict(hand_trace())
    data["steps"][0]["start"] = 1e300
    data["steps"][3]["start"] = 1.7e308
    path = write_json(tmp_path / "t.json", data)
    out = tmp_path / "t.perfetto.json"
    result = cgviz("export", path, "-o", out)
    assert result.returncode == 0, result.stderr[-2000:]
    strict_json(out.read_text())


# -- no command writes over its input -------------------------------------------------------------------
def same_file_ways(tmp_path: Path, target: Path) -> dict[str, str]:
    """Ways to name `target` again: itself, with ./, a symbolic link, a hard link."""
    ways = {"itself": str(target), "dot": os.path.join(str(target.parent), ".", target.name)}
    for way, make, name in (("symlink", "symlink", "link.json"), ("hardlink", "link", "hard.json")):
        if hasattr(os, make):
            try:
                getattr(os, make)(target, tmp_path / name)
                ways[way] = str(tmp_path / name)
            except OSError:
                pass
    return ways


@pytest.mark.parametrize("way", ["itself", "dot", "symlink", "hardlink"])
def test_render_refuses_to_write_over_its_trace(tmp_path, way):
    trace = timed_trace(tmp_path)
    before = trace.read_bytes()
    ways = same_file_ways(tmp_path, trace)
    if way not in ways:
        pytest.skip(f"no {way} here")
    refused(cgviz("render", trace, "-o", ways[way]), ways[way], "is the trace being rendered")
    assert trace.read_bytes() == before


def test_render_from_the_trace_directory_refuses_dot_slash(tmp_path):
    trace = timed_trace(tmp_path)
    before = trace.read_bytes()
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "cgviz", "render", "t.json", "-o", "./t.json"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=TIMEOUT, env=environ)
    refused(result, "./t.json", "is the trace being rendered")
    assert trace.read_bytes() == before


@pytest.mark.parametrize("way", ["itself", "symlink", "hardlink"])
def test_export_refuses_to_write_over_the_profiler_trace(tmp_path, way):
    trace = timed_trace(tmp_path)
    profiler = tmp_path / "profile.json"
    profiler.write_text('{"traceEvents": []}')
    ways = same_file_ways(tmp_path, profiler)
    if way not in ways:
        pytest.skip(f"no {way} here")
    refused(cgviz("export", trace, "--merge", profiler, "-o", ways[way]), ways[way], "is the profiler trace")
    assert profiler.read_text() == '{"traceEvents": []}'


@pytest.mark.parametrize("way", ["symlink", "hardlink"])
def test_merge_and_export_refuse_a_link_to_their_input(tmp_path, way):
    trace = timed_trace(tmp_path)
    before = trace.read_bytes()
    ways = same_file_ways(tmp_path, trace)
    if way not in ways:
        pytest.skip(f"no {way} here")
    refused(cgviz("export", trace, "-o", ways[way]), ways[way])
    refused(cgviz("merge", trace, "-o", ways[way]), ways[way])
    assert trace.read_bytes() == before


# -- terminal escapes: shown, not obeyed --------------------------------------------------------------------
UNSAFE = "\x1b]0;owned\x07\x1b[2J\r\x08\x00\x7f\x9b31m\x85\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_terminal_text_escapes_controls_and_keeps_layout_and_text():
    terminal_text = cli.terminal_text
    assert terminal_text("a\tb\nc é 中 ✓ 🙂 \\x1b") == "a\tb\nc é 中 ✓ 🙂 \\x1b"
    shown = terminal_text(UNSAFE)
    assert shown == ("\\x1b]0;owned\\x07\\x1b[2J\\r\\x08\\x00\\x7f\\x9b31m\\x85\\u2028\\u2029\\u202a\\u202b\\u202c"
                     "\\u202d\\u202e\\u2066\\u2067\\u2068\\u2069")
    for c in map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F),
                       *range(0x2066, 0x206A)]):
        if c not in "\n\t":
            assert c not in terminal_text(f"x{c}y"), repr(c)


def raw_controls(text: str) -> list[str]:
    """The characters of `text` a terminal would obey (all but newline and tab)."""
    return sorted({c for c in text if c not in "\n\t" and (ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0
                                                           or c in "\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
                                                           "\u2066\u2067\u2068\u2069")})


def hostile_trace(tmp_path: Path, name: str, rank: int) -> Path:
    """A trace whose function names, reasons, meta and file name carry terminal escapes."""
    data = to_dict(hand_trace())
    for step in data["steps"]:
        if step.get("function") == "g":
            step["function"] = "g" + UNSAFE
    data["steps"][4]["reason"] = "g raised" + UNSAFE
    data["steps"][1]["kind"] = "eager" if rank else "record"
    data["steps"][1]["reason"] = "fell back" + UNSAFE
    data["meta"].update(rank=rank, device=f"cuda:{rank}{UNSAFE}", devices=[f"cuda:0{UNSAFE}"])
    for step in data["steps"]:
        step["device"] = "cuda:0"
    return write_json(tmp_path / name, data)


@pytest.mark.skipif(not POSIX, reason="escape characters in file names")
def test_doctor_info_and_merge_show_escapes_instead_of_obeying_them(tmp_path):
    a = hostile_trace(tmp_path, "r0\x1b[2J.json", 0)
    b = hostile_trace(tmp_path, "r1.json", 1)
    merged = tmp_path / "all\x9b.json"
    runs = {
        "doctor": cgviz("doctor", b),
        "merge": cgviz("merge", a, b, "-o", merged),
        "info": cgviz("info", merged),
        "doctor merged": cgviz("doctor", merged),
    }
    for name, result in runs.items():
        assert result.returncode == 0, (name, result.stderr[-2000:])
        assert raw_controls(result.stdout + result.stderr) == [], (name, result.stdout)
        assert "\\x1b" in result.stdout, (name, result.stdout)


@pytest.mark.skipif(not POSIX, reason="escape characters in file names")
def test_error_messages_show_escapes_too(tmp_path):
    data = to_dict(hand_trace())
    data["meta"]["x"] = "RAW"
    path = tmp_path / "t\x9b2J\u202e.json"
    path.write_text(json.dumps(data).replace('"RAW"', "NaN"), encoding="utf-8")
    for command in ("info", "doctor", "render"):
        line = refused(cgviz(command, path), "is NaN, which is not a JSON number")
        assert raw_controls(line) == [] and "t\\x9b2J\\u202e.json" in line, line
    line = refused(cgviz("info", tmp_path / "gone\x1b[2J.json"), "trace file not found")
    assert raw_controls(line) == [] and "gone\\x1b[2J.json" in line, line
    if LINUX:  # a file name of bytes that are not UTF-8: printed escaped, not a UnicodeEncodeError
        path = write_json(tmp_path / os.fsdecode(b"ok\xff.json"), to_dict(hand_trace()))
        result = cgviz("info", path)
        assert result.returncode == 0 and "ok\\udcff.json: 5 steps" in result.stdout, result.stdout + result.stderr


@pytest.mark.skipif(not POSIX, reason="escape characters in file names")
def test_merge_errors_show_escapes(tmp_path):
    a = hostile_trace(tmp_path, "a\x1b[2J.json", 0)
    b = hostile_trace(tmp_path, "b\x1b]0;x\x07.json", 0)  # one rank twice
    line = refused(cgviz("merge", a, b, "-o", tmp_path / "all.json"), "rank 0 is in two traces")
    assert raw_controls(line) == [], line
