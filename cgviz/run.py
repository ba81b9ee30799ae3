"""`cgviz run script.py [args ...]` / `cgviz run -m module [args ...]`: a Python program run
unchanged under `cgviz.observe_torch`, as `python script.py` would run it.

Whatever way the program ends (it returns, raises, calls sys.exit(n), or is interrupted), its
trace is saved, a short diagnosis goes to stderr, and then the command ends as the program would
have: its exception's traceback (exit 1), its exit status, 130 for KeyboardInterrupt, or 143 for
SIGTERM (torchrun's way to stop the other ranks). Problems found before the program starts (no
such script, no such module, an output that cannot be written) are one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator, NamedTuple, Optional, Sequence

from cgviz.cli import terminal_text

DEFAULT_TRACE = "cgviz-run.cgtrace.json"
DEFAULT_RANK_TRACE = "cgviz-run-{rank}.cgtrace.json"
LEVELS = ("full", "events")
_VALUED = ("--trace-out", "--level", "--html")  # the run options that take a value
SHOWN_FINDINGS = 3
USAGE = ("cgviz run [-h] [--trace-out PATH] [--level {full,events}] [--graphs] [--timed] [--html PATH] "
         "[--no-summary] (script.py | -m module) [args ...]")


class Terminated(BaseException):
    """The program was sent SIGTERM (torchrun stops the other ranks so): it ends as a terminated
    program does (exit 143), after its trace is saved."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def _sigterm_ends_the_program() -> Iterator[None]:
    """While the program runs, SIGTERM unwinds it (so the trace is saved) instead of killing the
    process; where the program's host set a handler of its own, that one stays."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


class UsageError(Exception):
    """A command line `cgviz run` cannot start the program from (exit 2)."""


class Split(NamedTuple):
    options: list[str]  # cgviz run's own options (parsed by argparse)
    script: Optional[str]
    module: Optional[str]
    args: list[str]  # the program's arguments


def split_argv(argv: Sequence[str]) -> Split:
    """`cgviz run`'s arguments split at the program: the options before the script (or `-m
    module`) are cgviz's, everything after it is the program's (`cgviz run train.py --lr 3`)."""
    options: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest = argv[i + 1:]
            return Split(options, rest[0] if rest else None, None, list(rest[1:]))
        if arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
            module = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            if not module:
                raise UsageError("-m needs a module to run (cgviz run -m package.module [args ...])")
            return Split(options, None, module, list(argv[i + (1 if arg[2:] else 2):]))
        if arg in _VALUED:
            options += argv[i:i + 2]
            i += 2
            continue
        if arg.startswith("-") and arg != "-":  # --no-summary, --help, --trace-out=PATH; argparse judges the rest
            options.append(arg)
            i += 1
            continue
        return Split(options, arg, None, list(argv[i + 1:]))
    return Split(options, None, None, [])


def add_parser(sub) -> argparse.ArgumentParser:
    run = sub.add_parser(
        "run", usage=USAGE, allow_abbrev=False,
        help="run a Python program (script.py or -m module) unchanged while torch.compile's CUDA graph trees "
             "are recorded, then save the trace and print the diagnosis",
        description="Run a Python program unchanged under cgviz.observe_torch: when it ends, however it ends, "
                    "the trace is saved and the first findings are printed to stderr; the command then exits "
                    "as the program would have.")
    run.add_argument("--trace-out", metavar="PATH",
                     help=f"where the trace goes (default {DEFAULT_TRACE}; under torchrun, with RANK set, "
                          f"{DEFAULT_RANK_TRACE}); {{rank}} and {{world_size}} are filled in")
    run.add_argument("--level", choices=LEVELS, default="full",
                     help="the trace level: full (timings, pool snapshots, kernels; it reads every output's "
                          "liveness at each decision, about a tenth of a training step's time) or events (the "
                          "decisions alone, about 1 %% of a step)")
    run.add_argument("--graphs", action="store_true",
                     help="also record every other CUDA graph of the program (torch.cuda.graph, "
                          "make_graphed_callables, ...; see cgviz.observe_graphs)")
    run.add_argument("--timed", action="store_true",
                     help="with --graphs: time each replay of those graphs with CUDA events")
    run.add_argument("--html", metavar="PATH", help="also write the explorer page there ({rank} is filled in)")
    run.add_argument("--no-summary", action="store_true", help="print nothing but errors when the program ends")
    run.add_argument("-m", dest="module", metavar="module", help="run a module, as python -m does")
    run.add_argument("script", nargs="?", help="the program (a .py file)")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the program's arguments")
    return run


def _complain(message: object) -> None:
    print(terminal_text(f"cgviz run: {message}"), file=sys.stderr, flush=True)


def _rank_label() -> Optional[str]:
    rank = os.environ.get("RANK", "").strip()
    return f"rank {rank}" if rank else None


def _outputs(args: argparse.Namespace) -> tuple[str, Optional[str], str]:
    """The trace's path and the page's, placeholders filled; and the trace path as given (for
    the merge hint). Raises UsageError when one cannot be filled or written."""
    from cgviz.trace.io import check_save_target
    from cgviz.trace.ranks import RankError, rank_path

    given = args.trace_out  # --trace-out '' is refused below, not taken for the default
    if given is None:
        given = DEFAULT_RANK_TRACE if os.environ.get("RANK", "").strip() else DEFAULT_TRACE
    filled = []
    for path, what in ((given, "trace"), (args.html, "HTML")):
        if path is None:
            filled.append(None)
            continue
        try:
            target = os.fspath(rank_path(path))
            check_save_target(target, what)
        except RankError as exc:
            raise UsageError(exc) from None
        except OSError as exc:
            raise UsageError(exc.strerror and f"cannot write {path}: {exc.strerror}" or exc) from None
        filled.append(target)
    if filled[1] is not None and os.path.abspath(filled[0]) == os.path.abspath(filled[1]):
        raise UsageError(f"--trace-out and --html are one file ({filled[0]}); give them different paths")
    return filled[0], filled[1], given


def _check_script(script: str) -> None:
    """Raise UsageError unless `script` is a readable regular file: Python would wait for ever on
    a FIFO no one writes to, and read /dev/zero without end."""
    import stat

    from cgviz.trace.files import special_kind

    if not os.path.exists(script):
        raise UsageError(f"no such file: {script or repr(script)}")
    if os.path.isdir(script):
        raise UsageError(f"{script} is a directory, not a Python script")
    mode = os.stat(script).st_mode
    if not stat.S_ISREG(mode):
        raise UsageError(f"{script} is {special_kind(mode)}, not a Python script (a regular file)")
    if not os.access(script, os.R_OK):
        raise UsageError(f"cannot read {script}: permission denied")


def _check_module(module: str) -> None:
    """Raise UsageError when `module` cannot be run with -m (sys.path as the program will have it)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:  # a package: runs its __main__
            if importlib.util.find_spec(module + ".__main__") is None:
                raise UsageError(f"{module} is a package without a __main__ module; it cannot be run with -m")
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001  (ModuleNotFoundError of a parent, a relative name, ...)
        raise UsageError(f"cannot run module {module}: {type(exc).__name__}: {exc}") from None
    if spec is None:
        raise UsageError(f"no module named {module}")


def main(args: argparse.Namespace) -> int:
    """Run the program `args` names (see `add_parser`) under observe_torch; the exit status."""
    path0 = os.path.dirname(os.path.abspath(args.script)) if args.script else os.getcwd()
    saved_path = list(sys.path)
    try:
        if args.module is None and args.script is None:
            raise UsageError("give a program to run: cgviz run script.py [args ...] or cgviz run -m module [args ...]")
        if args.script is not None:
            _check_script(args.script)
        out, html, given = _outputs(args)
        if args.timed and not args.graphs:
            raise UsageError("--timed times the replays of the graphs --graphs records: give --graphs too")
        if args.module is not None:
            sys.path.insert(0, path0)
            try:
                _check_module(args.module)
            finally:
                sys.path[:] = saved_path
    except UsageError as exc:
        _complain(exc)
        return 2
    # what the end needs, imported before the program can change sys.path or sys.modules
    from cgviz.observe.naming import OVERWRITTEN
    from cgviz.observe.graphs import start_observing_graphs, stop_observing_graphs
    from cgviz.observe.torch_compile import start_observing, stop_observing
    from cgviz.trace.diagnose import diagnose  # noqa: F401
    from cgviz.trace.ranks import rank_path  # noqa: F401
    from cgviz.views.text import trace_counts  # noqa: F401

    if html is not None:
        import cgviz.views.html  # noqa: F401

    try:
        observer = start_observing(args.level)
    except Exception as exc:  # noqa: BLE001
        _complain(f"cannot observe torch.compile, so the program was not run: {type(exc).__name__}: {exc}")
        return 1
    graphs = None
    if args.graphs:
        try:
            graphs = start_observing_graphs(args.level, timed=args.timed, tree=observer)
        except Exception as exc:  # noqa: BLE001
            stop_observing(observer)
            _complain(f"cannot observe CUDA graphs, so the program was not run: {type(exc).__name__}: {exc}")
            return 1
    saved_argv = sys.argv
    outcome: Optional[BaseException] = None
    try:
        sys.path.insert(0, path0)
        with _sigterm_ends_the_program():
            if args.module is not None:
                sys.argv = [args.module, *args.args]  # run_module puts the module's file in argv[0]
                runpy.run_module(args.module, run_name="__main__", alter_sys=True)
            else:
                sys.argv = [args.script, *args.args]
                runpy.run_path(args.script, run_name="__main__")
    except BaseException as exc:  # noqa: BLE001  (the program's end, whatever it is: reported after saving)
        outcome = exc
        if isinstance(exc, RuntimeError) and OVERWRITTEN in str(exc):
            try:
                observer.error_raised(exc)
            except Exception as failed:  # noqa: BLE001
                _complain(f"could not note the error in the trace: {type(failed).__name__}: {failed}")
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    try:
        if graphs is not None:
            stop_observing_graphs(graphs)
        trace = stop_observing(observer)
    except Exception as exc:  # noqa: BLE001  (what was recorded so far is still saved)
        _complain(f"stopping the observer failed ({type(exc).__name__}: {exc}); saving what was recorded")
        trace = observer.trace
    return _finish(args, trace, out, html, given, outcome)


def _finish(args: argparse.Namespace, trace, out: str, html: Optional[str], given: str,
            outcome: Optional[BaseException]) -> int:
    sys.stdout.flush()
    saved, wrote = _save(trace, out), _page(trace, html) if html is not None else None
    if not args.no_summary:
        _summary(trace, saved, html if wrote else None, given)
    status = _status(outcome)
    if status == 0 and (saved is None or saved != out or (html is not None and not wrote)):
        return 1  # the program succeeded, but what cgviz was asked to write is not all where it should be
    return status


def _save(trace, out: str) -> Optional[str]:
    """Save `trace` at `out`, else in the temporary folder; where it went (None: nowhere)."""
    from cgviz.trace.ranks import rank_path

    try:
        trace.save(rank_path(out, trace))  # the rank (and device) noted in its meta
        return out
    except Exception as exc:  # noqa: BLE001  (never hides the program's own end)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        _complain(f"could not save the trace to {out}: {why}")
    try:
        fd, fallback = tempfile.mkstemp(prefix="cgviz-run-", suffix=".cgtrace.json")
        os.close(fd)
        trace.save(fallback)
    except Exception as exc:  # noqa: BLE001
        _complain(f"could not save it to the temporary folder either ({exc}): the trace is lost")
        return None
    _complain(f"the trace was saved to {fallback} instead")
    return fallback


def _page(trace, html: str) -> bool:
    from cgviz.progress import ProgressBar
    from cgviz.views.html import to_html

    bar = ProgressBar()
    try:
        to_html(trace, html, progress=bar)
        return True
    except Exception as exc:  # noqa: BLE001
        bar.close()
        _complain(f"could not write the explorer page to {html}: "
                  f"{exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")
        return False
    finally:
        bar.close()


def _summary(trace, saved: Optional[str], html: Optional[str], given: str) -> None:
    from cgviz.trace.diagnose import diagnose
    from cgviz.views.text import trace_counts

    rank = _rank_label()
    where = f"trace saved to {saved}" if saved else "trace not saved"
    _complain(f"{rank + ': ' if rank else ''}{where} ({trace_counts(trace)})")
    if html:
        _complain(f"explorer page: {html} (open {Path(html).resolve().as_uri()} in a browser)")
    findings = list(diagnose(trace))
    if not trace.steps or not findings:
        _complain(f"no findings: {_why_empty(trace)}")
    else:
        shown = findings[:SHOWN_FINDINGS]
        more = f" (the first {len(shown)} of {len(findings)}; cgviz doctor {saved} shows all)" \
            if len(findings) > len(shown) and saved else ""
        _complain(f"findings{more}:")
        print(terminal_text("\n".join("  " + f.text().replace("\n", "\n  ") for f in shown)), file=sys.stderr)
    if os.environ.get("RANK", "").strip() == "0" and os.environ.get("WORLD_SIZE", "").strip() != "1":
        pattern = given.replace("{rank}", "*")
        if "{world_size}" in pattern:
            pattern = pattern.replace("{world_size}", os.environ.get("WORLD_SIZE", "*").strip() or "*")
        if "{rank}" in given:
            _complain(f"each rank wrote its own trace; merge them with: cgviz merge {pattern} -o all.cgtrace.json")
        else:
            _complain(f"note: --trace-out {given} has no {{rank}}, so every rank wrote the same file; "
                      "give it one (run-{rank}.cgtrace.json) to keep each rank's trace")
    sys.stderr.flush()


def _why_empty(trace) -> str:
    import torch

    if trace.steps:
        return "nothing in the trace looks wrong"
    if not torch.cuda.is_available():
        return ("nothing was called through a tree: this machine has no CUDA (torch.cuda.is_available() is "
                "False), and torch.compile(mode=\"reduce-overhead\") makes CUDA graph trees only on a GPU")
    if trace.meta.get("graphs_observed"):
        return ("the program made no call through torch.compile(mode=\"reduce-overhead\")'s CUDA graph trees "
                "and captured or replayed no other CUDA graph")
    return ("nothing was called through a tree: the program made no call through torch.compile(mode="
            "\"reduce-overhead\")'s CUDA graph trees")


def _status(outcome: Optional[BaseException]) -> int:
    """The exit status the program's end gives, its traceback printed as Python prints it."""
    if outcome is None:
        return 0
    if isinstance(outcome, Terminated):
        return 128 + signal.SIGTERM  # as a process killed by SIGTERM reports it (143), no traceback
    if isinstance(outcome, SystemExit):
        code = outcome.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)  # as Python does for sys.exit("message")
        return 1
    tb = outcome.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in (__name__, "runpy"):  # cgviz's and runpy's
        tb = tb.tb_next
    outcome = outcome.with_traceback(tb)  # the traceback starts in the program, as `python script.py` shows it
    sys.stderr.flush()
    try:
        sys.excepthook(type(outcome), outcome, tb)  # the program's hook, if it set one
    except Exception:  # noqa: BLE001
        import traceback

        traceback.print_exception(type(outcome), outcome, tb)
    return 130 if isinstance(outcome, KeyboardInterrupt) else 1
