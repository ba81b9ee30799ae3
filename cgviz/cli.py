"""The `cgviz` command: demo a scenario, run a program under observe_torch (cgviz/run.py), render a
saved trace as HTML, export it for Perfetto, merge the traces of a multi-rank job, report versions
and backends or what a saved trace holds."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from cgviz.progress import ProgressBar
from cgviz.trace.units import plural

SCENARIO_DEFAULT = "branching"
# the demo's scenarios, by name, as cgviz.scenarios.SCENARIOS has them: that module imports torch,
# which a command that runs no scenario need not wait for
SCENARIO_NAMES = ("chain", "branching", "generations", "fwd_bwd", "static_move", "dynamic_shapes", "training")


DEMO_HTML = "cgviz-demo.html"
HTML_SUFFIXES = (".html", ".htm")


def _is_html(path: str) -> bool:
    return path.lower().endswith(HTML_SUFFIXES)


# What a terminal obeys instead of showing: C0 controls but newline and tab (ESC starts sequences
# that retitle, clear or rewrite a terminal; CR and BS overwrite what was printed), DEL, C1
# controls (0x9b is CSI on its own), the line and paragraph separators, and the bidirectional
# controls that reorder what is shown (U+202A-202E, U+2066-2069, and the marks U+200E, U+200F, U+061C);
# and lone surrogates (a file name of bytes that are not UTF-8), which could not be printed at all.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")
_NAMED = {"\r": "\\r"}


def _escaped(found: "re.Match[str]") -> str:
    c = found.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def terminal_text(text: str) -> str:
    """`text` as a terminal may be given it: each character a terminal would obey rather than show
    (see `_UNSAFE`) written as its escape (ESC as `\\x1b`, U+202E as `\\u202e`), newlines and tabs
    kept as layout. Every line the command prints goes through it, since a trace, its file name
    and the messages about it come from whoever wrote the file."""
    return _UNSAFE.sub(_escaped, text) if _UNSAFE.search(text) else text


def _say(*parts: object, flush: bool = False) -> None:
    """print() to stdout, through `terminal_text`."""
    print(terminal_text(" ".join(map(str, parts))), flush=flush)


def _complain(command: str, message: object) -> None:
    """'cgviz COMMAND: message' on stderr, through `terminal_text`."""
    print(terminal_text(f"cgviz {command}: {message}"), file=sys.stderr)


def _demo(args: argparse.Namespace) -> int:
    from cgviz.scenarios import SCENARIOS, run_scenario
    from cgviz.views.text import step_lines

    if args.scenario not in SCENARIOS:
        _complain("demo", f"unknown scenario {args.scenario!r}; choose from {', '.join(SCENARIOS)}")
        return 2
    outputs = args.output or []
    html_paths = [p for p in outputs if _is_html(p)] or [DEMO_HTML]
    trace_paths = [p for p in outputs if not _is_html(p)]
    from cgviz.trace.io import check_save_target

    for path in trace_paths + html_paths:  # refuse a FIFO, a directory, ... before running anything
        try:
            check_save_target(path, "HTML" if _is_html(path) else "trace")
        except OSError as exc:
            _complain("demo", _os_message(exc, "write", path))
            return 1
    scenario = SCENARIOS[args.scenario]
    _say(f"cgviz demo · {scenario.title} · backend {args.backend}", flush=True)
    _say(scenario.description)
    run = run_scenario(args.scenario, device=args.backend)
    trace = run.trace
    if args.text:
        _say()
        _say("steps:")
        _say("\n".join(step_lines(trace.steps)))
        _say()
        _say(run.tree.explain())
    else:
        counts = ", ".join(f"{n} {kind}" for kind, n in trace.counts().items() if n)
        _say(f"{plural(len(trace.steps), 'step')} ({counts}) on {trace.meta.get('device', args.backend)}")
    if run.mismatches:
        _complain("demo", "\n  ".join(["results that differ from eager:", *map(str, run.mismatches)]))
        return 1
    _say(f"\nall results equal eager ({trace.calls} decisions)")
    from cgviz.views.html import to_html

    for path in trace_paths + html_paths:
        try:
            if _is_html(path):
                bar = ProgressBar()
                try:
                    to_html(trace, path, progress=bar)
                finally:
                    bar.close()
            else:
                trace.save(path)
        except OSError as exc:
            _complain("demo", _os_message(exc, "write", path))
            return 1
        if _is_html(path):
            _say(f"explorer written to {path} (open {Path(path).resolve().as_uri()} in a browser)")
        else:
            _say(f"trace saved to {path}")
    return 0


def _os_message(exc: OSError, verb: str, path: str) -> str:
    """'cannot write out.html: Permission denied' (or the exception's own message, when it has no errno text)."""
    return f"cannot {verb} {path}: {exc.strerror}" if exc.strerror else str(exc)


def _given(path: str) -> str:
    """`path` as a message names it: an empty one says so instead of vanishing from the message."""
    return path or "'' (an empty path)"


def _load(command: str, path: str):
    """The trace at `path`, or None after one line on stderr saying why it cannot be read."""
    from cgviz.trace.io import TraceFormatError, load_trace

    try:
        return load_trace(path)
    except FileNotFoundError:
        _complain(command, f"trace file not found: {_given(path)}")
    except TraceFormatError as exc:
        _complain(command, exc)
    except OSError as exc:  # a directory, a FIFO, no permission, ...
        _complain(command, _os_message(exc, "read", path))
    return None


def _writable(command: str, out: str, what: str, inputs: Sequence[tuple[str, str]]) -> bool:
    """Whether `out` may be written (as `what`), before any work: a path a save would refuse (a
    FIFO, a directory, a read-only file, ...) or one naming an input of the command (`inputs`:
    (path, 'the trace being rendered'), itself, through a symbolic link or as a hard link) is
    refused with one line on stderr."""
    from cgviz.trace.io import check_save_target

    try:
        check_save_target(out, what)
        if os.path.exists(out):
            for path, role in inputs:
                if os.path.exists(path) and os.path.samefile(out, path):
                    _complain(command, f"{out} is {role}; choose another output file")
                    return False
    except OSError as exc:
        _complain(command, _os_message(exc, "write", out))
        return False
    return True


def _render(args: argparse.Namespace) -> int:
    out = _default_html_path(args.trace) if args.output is None else args.output  # -o '' is refused, not the default
    if not _writable("render", out, "HTML", [(args.trace, "the trace being rendered")]):
        return 1
    trace = _load("render", args.trace)
    if trace is None:
        return 1
    from cgviz.views.html import to_html

    bar = ProgressBar()
    try:
        to_html(trace, out, title=args.title, renderer=args.renderer, progress=bar)
    except OSError as exc:
        bar.close()
        _complain("render", _os_message(exc, "write", out))
        return 1
    finally:
        bar.close()
    _say(f"{plural(len(trace.steps), 'step')} from {args.trace} → {out} (open {Path(out).resolve().as_uri()} in a browser)")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    trace = _load("doctor", args.trace)
    if trace is None:
        return 1
    from cgviz.trace.diagnose import diagnose

    diagnosis = diagnose(trace)
    if args.json:
        import json

        _say(json.dumps(diagnosis.to_dict(), indent=2))
    else:
        _say(diagnosis.text())
    return 0


EXPORT_FORMATS = ("perfetto", "chrome")  # one JSON file, which both open


def _export(args: argparse.Namespace) -> int:
    out = _default_export_path(args.trace) if args.output is None else args.output  # -o '' is refused
    inputs = [(args.trace, "the trace being exported")]
    if args.merge is not None:
        inputs.append((args.merge, "the profiler trace being merged into"))
    if not _writable("export", out, "Chrome trace", inputs):  # before any work, as `cgviz demo` does
        return 1
    trace = _load("export", args.trace)
    if trace is None:
        return 1
    from cgviz.trace.chrome_trace import to_chrome_trace, write_chrome_trace
    from cgviz.trace.profiler_trace import ProfilerTraceError, read_profiler_trace

    profiler, nulls = None, 0
    if args.merge is not None:
        try:
            profiler, nulls = read_profiler_trace(args.merge)
        except FileNotFoundError:
            _complain("export", f"profiler trace not found: {_given(args.merge)}")
            return 1
        except ProfilerTraceError as exc:
            _complain("export", exc)
            return 1
        except OSError as exc:  # a directory, a FIFO, no permission, ...
            _complain("export", _os_message(exc, "read", args.merge))
            return 1
    try:
        data = to_chrome_trace(trace, profiler, folded=args.folded, max_slices=args.max_slices)
    except ValueError as exc:  # a trace without start times to merge
        _complain("export", f"{args.trace}: {exc}")
        return 1
    try:
        nulls += write_chrome_trace(data, out)
    except OSError as exc:
        _complain("export", _os_message(exc, "write", out))
        return 1
    info = data["otherData"]["cgviz"] if profiler is not None else data["otherData"]
    if "warning" in info:
        _complain("export", f"warning: {info['warning']}")
    if nulls:
        _complain("export", f"note: {nulls:,} number{'s that were' if nulls != 1 else ' that was'} NaN or infinite "
                            "(not JSON) written as null")
    merged = f", merged into {args.merge}" if profiler is not None else ""
    _say(f"{info['decisions_drawn']:,} decisions from {args.trace}{merged} → {out} "
         "(open it in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def _merge(args: argparse.Namespace) -> int:
    """The traces of a multi-rank job's ranks as one trace, then where the ranks diverged."""
    import glob

    from cgviz.trace.io import dumps, write_atomic
    from cgviz.trace.ranks import MergeError, divergence, merge, rank_traces

    paths: list[str] = []
    for pattern in args.traces:  # wildcards a shell left as they are (Windows' cmd does)
        wild = any(c in pattern for c in "*?[") and not os.path.exists(pattern)
        matches = sorted(glob.glob(pattern)) if wild else [pattern]
        if not matches:
            _complain("merge", f"no trace file matches {pattern}")
            return 1
        paths += matches
    seen: dict[str, str] = {}
    for path in paths:
        if os.path.realpath(path) in seen:
            _complain("merge", f"{path} is given twice (as {seen[os.path.realpath(path)]} too): give each rank's "
                               "trace once")
            return 1
        seen[os.path.realpath(path)] = path
    out = args.output
    if not _writable("merge", out, "merged trace", [(p, "one of the traces being merged") for p in paths]):
        return 1
    traces = []
    for path in paths:
        trace = _load("merge", path)
        if trace is None:
            return 1
        traces.append(trace)
    try:
        merged = merge(traces, names=paths)
    except MergeError as exc:
        _complain("merge", exc)
        return 1
    text = dumps(merged)
    try:
        write_atomic(out, lambda fh: fh.write(text), "merged trace")
    except OSError as exc:
        _complain("merge", _os_message(exc, "write", out))
        return 1
    ranks = list(rank_traces(merged))
    world = merged.meta.get("world_size")
    of = f" of world size {world}" if world else ""
    _say(f"ranks {', '.join(map(str, ranks))}{of}: {len(merged.steps):,} steps from {len(paths)} "
         f"file{'s' if len(paths) != 1 else ''} → {out}")
    missing = _missing_ranks(ranks, world) if world else ""
    if missing:
        _complain("merge", f"note: no trace of {missing} among them")
    found = divergence(merged)
    if not found:
        _say("no divergence: every rank made the same decisions, call by call")
    else:
        _say(f"where the ranks diverged ({len(found)} finding{'s' if len(found) != 1 else ''}; steps counted in the "
             "merged trace):")
        _say("\n".join(f.text() for f in found))
    _say(f"(cgviz doctor {out} diagnoses it; cgviz render {out} shows it)")
    return 0


def _missing_ranks(ranks: Sequence[int], world: int, shown: int = 10) -> str:
    """'rank 3', 'ranks 2, 3', or 'ranks 2, 3, ... 11 and 1,000 more': the ranks below `world` that
    are not among `ranks` (each below `world`), the first `shown` named. Counted, not listed: a
    world size is a number from a file, however large."""
    have, first, r = set(ranks), [], 0
    while len(first) < shown and r < world:
        if r not in have:
            first.append(r)
        r += 1
    more = world - len(have) - len(first)
    if not first:
        return ""
    named = ", ".join(map(str, first)) + (f" and {more:,} more" if more else "")
    return f"rank{'s' if len(first) > 1 else ''} {named}"


def _default_export_path(trace_path: str) -> str:
    """run.cgtrace.json → run.perfetto.json, run.json → run.perfetto.json, run → run.perfetto.json."""
    for suffix in (".cgtrace.json", ".json"):
        if trace_path.lower().endswith(suffix) and len(trace_path) > len(suffix):
            return trace_path[: -len(suffix)] + ".perfetto.json"
    return trace_path + ".perfetto.json"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {value}")
    return value


def _default_html_path(trace_path: str) -> str:
    """run.cgtrace.json → run.html, run.json → run.html, run → run.html."""
    for suffix in (".cgtrace.json", ".json"):
        if trace_path.lower().endswith(suffix) and len(trace_path) > len(suffix):
            return trace_path[: -len(suffix)] + ".html"
    return trace_path + ".html"


def _info(args: argparse.Namespace) -> int:
    if args.trace is not None:
        return _trace_info(args.trace)
    import platform

    import torch

    import cgviz
    from cgviz.engine import _torch_compat

    _say(f"cgviz {cgviz.__version__}")
    _say(f"python {platform.python_version()} · torch {torch.__version__}")
    cuda = torch.cuda.is_available()
    _say("backends:")
    _say("  sim   available (CPU simulation)")
    if cuda:
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        _say(f"  cuda  available: {torch.cuda.device_count()} device(s): {names}")
    else:
        built = "without CUDA" if torch.version.cuda is None else f"with CUDA {torch.version.cuda}, but no device"
        _say(f"  cuda  unavailable (torch built {built})")
    _say("private torch functions used by the cuda backend:")
    for need, found in _torch_compat.FOUND.items():
        _say(f"  {need:<38} {found or 'missing'}")
    guard = _torch_compat.signature_guard((torch.zeros(1),)) is not None
    _say(f"  {'signature check on replay':<38} "
         f"{'TensorGuards (C++)' if guard else 'missing: each call builds its signature in Python'}")
    return 0


def _trace_info(path: str) -> int:
    """What a saved trace holds; for a merged multi-rank trace, its ranks and each one's counts,
    and for a trace of trees on several devices, each device's."""
    from cgviz.trace.ranks import is_merged, rank_traces
    from cgviz.views.text import device_count_lines, devices_summary, rank_count_lines, ranks_summary, trace_counts

    trace = _load("info", path)
    if trace is None:
        return 1
    _say(f"{path}: {trace_counts(trace)}")
    if is_merged(trace):
        _say(ranks_summary(trace.meta))
        _say("\n".join(rank_count_lines({rank: part.trace for rank, part in rank_traces(trace).items()})))
    devices = device_count_lines(trace)
    if devices:
        listed = trace.meta.get("devices")
        _say(devices_summary(listed) if isinstance(listed, list) else f"{len(devices)} devices")
        _say("\n".join(devices))
    return 0


def _run(args: argparse.Namespace) -> int:
    from cgviz.run import main as run_main

    return run_main(args)


def build_parser() -> argparse.ArgumentParser:
    import cgviz
    from cgviz.run import add_parser as add_run_parser

    parser = argparse.ArgumentParser(prog="cgviz", description="Run and inspect CUDA graph trees.")
    parser.add_argument("--version", action="version", version=f"cgviz {cgviz.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a scenario and show its tree, steps and reasons")
    demo.add_argument("--backend", choices=("auto", "sim", "cuda"), default="auto")
    demo.add_argument("--scenario", default=SCENARIO_DEFAULT, help=f"one of: {', '.join(SCENARIO_NAMES)}")
    demo.add_argument("--text", action="store_true", help="also print the steps, reasons and tree in the terminal")
    demo.add_argument(
        "-o", "--output", action="append", metavar="PATH",
        help=f"where to write: a .html path gets the explorer page (default {DEMO_HTML}), any other path "
             "the trace as JSON; repeat for both",
    )
    demo.set_defaults(run=_demo)
    add_run_parser(sub).set_defaults(run=_run)
    render = sub.add_parser("render", help="write a saved trace as a standalone HTML explorer")
    render.add_argument("trace", metavar="TRACE", help="a trace saved as JSON (run.cgtrace.json)")
    render.add_argument("-o", "--output", metavar="PATH", help="the HTML file (default: TRACE with .html)")
    render.add_argument("--title", help="the page title (default: cgviz · scenario · backend)")
    render.add_argument("--renderer", choices=("auto", "graphviz", "builtin"), default="auto",
                        help="how trees are laid out (auto: Graphviz when installed and the trace is small enough)")
    render.set_defaults(run=_render)
    doctor = sub.add_parser("doctor", help="what went wrong in a saved trace, where, and the fix")
    doctor.add_argument("trace", metavar="TRACE", help="a trace saved as JSON (run.cgtrace.json)")
    doctor.add_argument("--json", action="store_true", help="the findings as JSON")
    doctor.set_defaults(run=_doctor)
    export = sub.add_parser("export", help="write a saved trace as a Perfetto / Chrome trace, optionally merged "
                                           "into a torch profiler trace of the same run")
    export.add_argument("trace", metavar="TRACE", help="a trace saved as JSON (run.cgtrace.json)")
    export.add_argument("--format", choices=EXPORT_FORMATS, default="perfetto",
                        help="perfetto or chrome: the same Trace Event Format JSON, which ui.perfetto.dev and "
                             "chrome://tracing both open (default perfetto)")
    export.add_argument("-o", "--output", metavar="PATH", help="the JSON file (default: TRACE with .perfetto.json)")
    export.add_argument("--merge", metavar="PROFILER_TRACE",
                        help="a torch profiler trace of the same run (export_chrome_trace's JSON, or .json.gz): "
                             "cgviz's steps are added to it on its clock")
    from cgviz.trace.chrome_trace import FOLDED, MAX_SLICES

    export.add_argument("--folded", choices=FOLDED, default="expand",
                        help="folded repeats: one slice per occurrence, the later ones' times estimated (expand, "
                             "the default), or one slice per folded step of its total duration (collapse)")
    export.add_argument("--max-slices", type=_positive_int, default=MAX_SLICES, metavar="N",
                        help=f"expand folded repeats only up to N decisions (default {MAX_SLICES:,}); "
                             "above, they are collapsed")
    export.set_defaults(run=_export)
    merge = sub.add_parser("merge", help="merge the traces of a multi-rank job's ranks (run-{rank}.cgtrace.json) "
                                         "into one, and say where the ranks diverged")
    merge.add_argument("traces", nargs="+", metavar="TRACE", help="each rank's trace (run-0.cgtrace.json ...; "
                                                                  "run-*.cgtrace.json)")
    merge.add_argument("-o", "--output", metavar="PATH", required=True, help="the merged trace (all.cgtrace.json)")
    merge.set_defaults(run=_merge)
    info = sub.add_parser("info", help="versions, backends, and the private torch functions found; with TRACE, "
                                       "what a saved trace holds (rank by rank for a merged one)")
    info.add_argument("trace", metavar="TRACE", nargs="?", help="a trace saved as JSON (run.cgtrace.json)")
    info.set_defaults(run=_info)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    program = None
    if argv[:1] == ["run"]:  # `cgviz run [options] script.py ARGS`: ARGS are the program's, not parsed here
        from cgviz.run import UsageError, split_argv

        try:
            program = split_argv(argv[1:])
        except UsageError as exc:
            _complain("run", exc)
            return 2
        argv = ["run", *program.options] + (["-m", program.module] if program.module is not None else [])
    args = build_parser().parse_args(argv)
    if program is not None:
        args.script, args.args = program.script, program.args
    try:
        return args.run(args)
    except RuntimeError as exc:  # e.g. --backend cuda without CUDA
        _complain(args.command, exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
