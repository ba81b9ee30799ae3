"""IPython magics: `%%cudagraph` runs a cell and shows what the CUDA graph trees did in it;
`%cgviz` inspects, explores, resets and saves a tree.

    %load_ext cgviz
    %%cudagraph [-n N] [--mark-step] [--torch] [--tree NAME] [--save PATH] [--no-widget]
    %cgviz status|explore|reset [NAME]
    %cgviz save PATH [NAME]

Arguments are split as a shell splits them: quote a PATH or NAME that holds spaces
(`--save "runs/my run.cgtrace.json"`); the quotes are not part of it.

`%%cudagraph` watches every `cgviz.Tree` of the process (see `cgviz.engine.registry`): the
steps any tree takes while the cell runs are summed up in plain text, and shown in an
Explorer widget (on a copy of the steps, so a displayed Explorer never slows the tree down
later; `%cgviz explore` gives one that follows the tree live). Trees live on in the user's
namespace, so running the cell again goes on from where the tree is: warmup, then record,
then replay.

A NAME is a tree's `name` (`cgviz.Tree(name="...")`; the default tree is "default") or the
name of a variable of the user's namespace that holds a tree.

Widgets, plotting and the Explorer load on first display only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import sys
import weakref
from collections import Counter
from typing import Any, Callable, Optional

from IPython.core import magic_arguments
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.utils.process import arg_split

import cgviz
from cgviz.engine import registry
from cgviz.trace.fold import tail_trace
from cgviz.views.text import KIND_WORDS, cell_summary, plural

# Step kinds in the order the summary names them, with the words it uses.
TORCH_UNAVAILABLE = "--torch needs cgviz.observe_torch (not available in this version)"
SUBCOMMANDS = ("status", "explore", "reset", "save", "doctor")


def split_arguments(line: str) -> list[str]:
    """The magic's line split as a shell splits it: quotes group words and are removed.

    IPython's parse_argstring splits with posix=False, which keeps the quotes, so a quoted
    path would name a file whose name starts with a quote. On Windows, posix splitting
    would eat the backslashes of a path, so the quotes are taken off each word instead.
    An unbalanced quote is a UsageError that says so.
    """
    try:
        if os.name != "nt":
            return arg_split(line, posix=True, strict=True)
        return [_unquote(word) for word in arg_split(line, posix=False, strict=True)]
    except ValueError as exc:
        raise UsageError(
            f"cannot split the arguments ({str(exc).lower()}): {line.strip()}; "
            "close the quote, or put a backslash before a quote meant literally"
        ) from None


def _unquote(word: str) -> str:
    """A word without the pair of quotes around it (posix=False splitting keeps them)."""
    if len(word) >= 2 and word[0] == word[-1] and word[0] in "\"'":
        return word[1:-1]
    return word


def _missing_directory(path: str) -> Optional[str]:
    """Why `path` cannot be written because of its parent directory, or None."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(parent):
        return None
    if os.path.exists(parent):
        return f"{parent} is not a directory"
    return f"directory {parent} does not exist (create it first)"


class _HelpFormatter(magic_arguments.MagicHelpFormatter):
    """IPython's magic help, with a plain "usage: %magic ..." line (not an RST block)."""

    def add_usage(self, usage, actions, groups, prefix="usage: %"):
        super().add_usage(usage, actions, groups, prefix)


# -- what a cell did to one tree --------------------------------------------------------------
@dataclasses.dataclass
class TreeActivity:
    """The steps one tree (or torch.compile's observed trees) took during a cell."""

    label: str
    trace: Any  # cgviz.Trace: the whole trace, as it is now
    tree: Any = None  # the cgviz.Tree; None for an observed torch.compile trace
    before: int = 0  # trace.calls before the cell
    new_trace: Any = None  # cgviz.Trace of the new decisions only (see tail_trace)
    now: Any = None  # the tree's Snapshot after the cell (None for an observed torch.compile trace)

    @property
    def new(self) -> int:
        return 0 if self.new_trace is None else self.new_trace.calls

    @property
    def level(self) -> Optional[str]:
        if self.tree is not None:
            return self.tree.trace_level
        return self.trace.meta.get("trace_level", "events")

    def counts(self) -> dict[str, int]:
        out = {kind: 0 for kind, _ in KIND_WORDS}
        if self.new_trace is not None:
            out.update(self.new_trace.counts())
        return out

    def reasons(self, kind: str) -> Counter:
        """Distinct reasons of the new steps of one kind (with how often), in order of first appearance."""
        out: Counter = Counter()
        if self.new_trace is not None:
            for step, times in zip(self.new_trace.steps, self.new_trace.repeats()):
                if step.kind == kind:
                    out[step.reason] += times
        return out


@dataclasses.dataclass
class CellResult:
    """What the last `%%cudagraph` cell did: kept as `CudaGraphMagics.last`."""

    runs: int  # runs asked for
    done: int = 0  # runs started
    error: Optional[BaseException] = None  # the exception that stopped the runs
    activities: list = dataclasses.field(default_factory=list)  # TreeActivity, one per tree reported
    explorers: list = dataclasses.field(default_factory=list)
    saved: Optional[str] = None
    summary: str = ""


# -- the new part of a trace ------------------------------------------------------------------
class _CallCounter:
    """`trace.calls` of each tree, cached while the trace is unchanged, so watching many
    trees costs little. A trace only grows: a new decision appends a step or folds into
    the last stored step (raising its repeat), so (length, last step, its repeat) moves."""

    def __init__(self) -> None:
        self._cache: "weakref.WeakKeyDictionary[Any, tuple]" = weakref.WeakKeyDictionary()

    def __call__(self, tree: Any) -> int:
        steps = tree.trace.steps
        last = steps[-1] if steps else None
        key = (len(steps), last, 0 if last is None else last.repeat)
        cached = self._cache.get(tree)
        if cached is not None and cached[0] == key[0] and cached[1] is key[1] and cached[2] == key[2]:
            return cached[3]
        calls = tree.trace.calls
        self._cache[tree] = (*key, calls)
        return calls


# -- the magics ---------------------------------------------------------------------------------
@magics_class
class CudaGraphMagics(Magics):
    """`%%cudagraph` and `%cgviz`. `last` is the last cell's CellResult; `explorers` the
    Explorer widgets the last command displayed."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self.last: Optional[CellResult] = None
        self.torch_trace: Any = None  # what the last %%cudagraph --torch cell observed
        self.explorers: list = []
        self._calls = _CallCounter()

    # -- %%cudagraph ------------------------------------------------------------------------
    @magic_arguments.magic_arguments(name="%cudagraph")
    @magic_arguments.kwds(add_help=True, formatter_class=_HelpFormatter, epilog=(
        "Steps that any cgviz.Tree takes while the cell runs are summed up per tree and\n"
        "shown in an Explorer. Run the cell again to go on: warmup, then record, then replay."
    ))
    @magic_arguments.argument(
        "-n", dest="runs", type=int, default=1, metavar="N", help="run the cell N times (default 1)"
    )
    @magic_arguments.argument(
        "--mark-step", action="store_true",
        help=(
            "call mark_step() (a new generation) before each run: on the default tree; with --tree, "
            "on that tree (and on the default tree if it exists)"
        ),
    )
    @magic_arguments.argument("--torch", action="store_true", help="also record torch.compile's own CUDA graph trees")
    @magic_arguments.argument(
        "--tree", metavar="NAME",
        help=(
            "the tree to explore and save (its name, or a variable holding it); the explorer shows "
            "its whole trace, not only the cell's steps"
        ),
    )
    @magic_arguments.argument(
        "--save", metavar="PATH",
        help="save the trace as JSON (cgviz.Trace.load reads it); quote a PATH that holds spaces; {rank} and "
             "{world_size} in it are filled in on each rank of a torch.distributed job",
    )
    @magic_arguments.argument("--no-widget", action="store_true", help="print the summary only, no Explorer")
    @cell_magic
    def cudagraph(self, line: str, cell: str) -> None:
        """Run the cell and show what the CUDA graph trees did in it."""
        parser = self.cudagraph.parser
        try:
            args = parser.parse_args(split_arguments(line))
            if args.runs < 1:
                raise UsageError(f"-n must be a positive number of runs, not {args.runs}")
            named = self._resolve(args.tree) if args.tree is not None else None
        except SystemExit:  # -h printed the help
            return
        except UsageError as exc:
            self._usage_error(parser, exc)
            return
        self.last = self._run(args, cell, named)

    def _run(self, args: Any, cell: str, named: Any) -> CellResult:
        result = CellResult(runs=args.runs)
        before = {tree: self._calls(tree) for tree in registry.all_trees()}
        torch_cm, torch_trace = self._start_torch() if args.torch else (None, None)
        exc_info: tuple = (None, None, None)
        try:
            for k in range(args.runs):
                if args.mark_step:
                    self._mark_step(named)
                result.done = k + 1
                run = self.shell.run_cell(cell, store_history=False, silent=k < args.runs - 1)
                error = None if run is None else (run.error_before_exec or run.error_in_exec)
                if error is not None:  # IPython has shown it; stop here, keep what was recorded
                    result.error = error
                    exc_info = (type(error), error, error.__traceback__)
                    break
        finally:
            if torch_cm is not None:
                with contextlib.suppress(Exception):
                    torch_cm.__exit__(*exc_info)

        for tree in registry.all_trees():
            now = self._calls(tree)
            start = before.get(tree, 0)
            if now > start or tree is named:
                new = tail_trace(tree.trace, now - start)
                result.activities.append(TreeActivity(self._label(tree), tree.trace, tree, start, new, tree.snapshot()))
        if torch_trace is not None:
            self.torch_trace = torch_trace  # for %cgviz doctor torch
            new = tail_trace(torch_trace, torch_trace.calls)
            result.activities.append(TreeActivity("torch.compile (observed)", torch_trace, None, 0, new))

        result.summary = self._summary(result, args)
        print(result.summary)
        if args.save is not None:  # --save '' says why nothing is saved
            result.saved = self._save_cell(result, named, args.save)
        if not args.no_widget:
            if named is not None:  # its whole trace as it is now (a copy: no listener left behind)
                result.explorers = self._show([tail_trace(named.trace, self._calls(named))])
            else:
                result.explorers = self._show([a.new_trace for a in result.activities if a.new])
        self.explorers = result.explorers
        return result

    def _summary(self, result: CellResult, args: Any) -> str:
        if result.error is not None:
            head = (
                f"%%cudagraph: run {result.done} of {result.runs} raised {type(result.error).__name__} "
                "(shown above); the steps recorded before it are kept"
            )
        else:
            head = f"%%cudagraph: ran the cell {'once' if result.runs == 1 else f'{result.runs} times'}"
        lines = [head]
        for activity in result.activities:
            lines.extend(cell_summary(activity))
        if not any(a.new for a in result.activities):
            lines.append(
                "no cgviz tree took a step (run functions wrapped by a cgviz.Tree, e.g. tree.wrap(fn) "
                "or @cgviz.graphed)"
            )
            if any(tree.trace_level is None for tree in registry.all_trees()):
                lines.append("(trees made with trace=None record no steps)")
        return "\n".join(lines)

    def _mark_step(self, named: Any) -> None:
        trees = [cgviz.default_tree()] if named is None else [named]
        if named is not None and cgviz._default_tree is not None and cgviz._default_tree is not named:
            trees.append(cgviz._default_tree)
        for tree in trees:
            tree.mark_step()

    def _start_torch(self) -> tuple:
        observe = _observe_torch()
        if observe is None:
            print(TORCH_UNAVAILABLE)
            return None, None
        try:
            cm = observe()
            trace = cm.__enter__()
        except Exception as exc:  # noqa: BLE001 - the cell still runs, without the observer
            print(f"--torch: could not observe torch.compile ({type(exc).__name__}: {exc}); running without it")
            return None, None
        return cm, trace

    def _save_cell(self, result: CellResult, named: Any, path: str) -> Optional[str]:
        if named is not None:
            target = next((a for a in result.activities if a.tree is named), None)
            label, trace = (target.label, target.trace) if target else (self._label(named), named.trace)
        else:
            took = [a for a in result.activities if a.new]
            if len(took) != 1:
                which = ", ".join(a.label for a in took) or "none"
                print(f"--save: {len(took)} trees took steps ({which}); name one with --tree NAME. Nothing saved.")
                return None
            label, trace = took[0].label, took[0].trace
        return self._save(trace, label, path)

    def _save(self, trace: Any, label: str, path: str) -> Optional[str]:
        from cgviz.trace.ranks import RankError, rank_path

        try:  # {rank} and {world_size} filled from torch.distributed or RANK; the rank noted in the meta
            path = rank_path(os.path.expanduser(path), trace)
            problem = _missing_directory(path)
        except RankError as exc:
            problem = str(exc)
        if problem is not None:
            print(f"cgviz: error: could not save the trace of {label}: {problem}", file=sys.stderr)
            return None
        try:
            trace.save(path)
        except (OSError, ValueError) as exc:
            print(f"cgviz: error: could not save the trace of {label}: {exc}", file=sys.stderr)
            return None
        print(f"saved the trace of {label} ({plural(trace.calls, 'step')}) to {path}")
        return path

    # -- %cgviz -----------------------------------------------------------------------------
    @magic_arguments.magic_arguments()
    @magic_arguments.kwds(add_help=True, formatter_class=_HelpFormatter, epilog=(
        "status [NAME]      the tree now: its nodes, current path, live outputs, last decisions\n"
        "explore [NAME]     an Explorer widget on the tree, following it live\n"
        "reset [NAME]       forget the tree's nodes and graphs (tree.reset())\n"
        "save PATH [NAME]   save the tree's trace as JSON\n"
        "doctor [NAME]      what went wrong in the tree's run, where (steps) and the fix;\n"
        "                   doctor torch: the run the last %%cudagraph --torch cell observed\n"
        "NAME: a tree's name or a variable holding a tree; without it, the default tree if there\n"
        "is one, else the newest tree."
    ))
    @magic_arguments.argument(
        "command", nargs="?", default="status", choices=SUBCOMMANDS, help="what to do (default: status)"
    )
    @magic_arguments.argument("args", nargs="*", help="PATH and/or NAME, as the command takes them")
    @line_magic
    def cgviz(self, line: str) -> None:
        """Inspect, explore, reset, save or diagnose a cgviz tree."""
        parser = self.cgviz.parser
        try:
            args = parser.parse_args(split_arguments(line))
            command, rest = args.command, list(args.args)
            path = None
            if command == "save":
                if not rest:
                    raise UsageError("save needs a PATH: %cgviz save PATH [NAME]")
                path = rest.pop(0)
            if len(rest) > 1:
                raise UsageError(f"{command} takes at most one tree NAME, got {len(rest)}: {' '.join(rest)}")
            if command == "doctor" and rest == ["torch"]:
                if self.torch_trace is None:
                    raise UsageError("no torch.compile run observed yet: run a cell with %%cudagraph --torch first")
                print(cgviz.diagnose(self.torch_trace).text())
                return
            tree = self._resolve(rest[0]) if rest else self._default()
        except SystemExit:
            return
        except UsageError as exc:
            self._usage_error(parser, exc)
            return
        label = self._label(tree)
        if command == "status":
            print(tree.explain())
        elif command == "explore":
            self.explorers = self._show([tree])
        elif command == "reset":
            forgotten = len(tree.nodes)
            tree.reset()
            print(f"reset {label}: {plural(forgotten, 'node')} and their graphs forgotten; the trace is kept")
        elif command == "save":
            self._save(tree.trace, label, path)
        elif command == "doctor":
            print(cgviz.diagnose(tree).text())

    # -- helpers ----------------------------------------------------------------------------
    def _usage_error(self, parser: Any, exc: BaseException) -> None:
        """The usage and a one-line error, instead of a traceback."""
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(parser.format_usage().rstrip(), file=sys.stderr)
        print(f"%{parser.prog}: error: {message}", file=sys.stderr)

    def _trees_in_namespace(self) -> dict[str, Any]:
        """User variables that hold a registered tree: name -> tree."""
        trees = registry.all_trees()
        if not trees:
            return {}
        ids = {id(t): t for t in trees}
        return {
            name: value
            for name, value in list(self.shell.user_ns.items())
            if not name.startswith("_") and id(value) in ids and ids[id(value)] is value
        }

    def _resolve(self, name: str) -> Any:
        """A tree by its name, or by the variable that holds it; UsageError if none."""
        tree = registry.find(name)
        if tree is not None:
            return tree
        held = self._trees_in_namespace().get(name)
        if held is not None:
            return held
        if name == "default":
            return cgviz.default_tree()
        known = sorted({repr(t.name) for t in registry.all_trees() if t.name})
        known += sorted(self._trees_in_namespace())
        hint = f"; known: {', '.join(known)}" if known else "; no tree exists yet"
        raise UsageError(f"no cgviz tree named {name!r}{hint}")

    def _default(self) -> Any:
        """Without a NAME: the default tree if it exists, else the newest tree, else a new default tree."""
        if cgviz._default_tree is not None:
            return cgviz._default_tree
        trees = registry.all_trees()
        return trees[-1] if trees else cgviz.default_tree()

    def _label(self, tree: Any) -> str:
        where = f" on {tree.backend.name}"
        if tree.name:
            return f"tree {tree.name!r}{where}"
        names = [name for name, value in self._trees_in_namespace().items() if value is tree]
        if names:
            return f"tree `{names[0]}`{where}"
        return f"unnamed tree{where}"

    def _show(self, targets: list) -> list:
        """Display an Explorer on each target (a Tree: live; a Trace), at its last step; without
        a widget library, the exported page inline."""
        if not targets:
            return []
        from IPython.display import display

        try:
            from cgviz.widgets.explorer import Explorer
        except ImportError as exc:
            for target in targets:
                display(_page_bundle(getattr(target, "trace", target)), raw=True)
            print(f"(no explorer widget: {exc}; the page above is the exported explorer. "
                  f'For the widget: pip install "cgviz[notebook]")')
            return []
        shown = []
        for target in targets:
            try:
                explorer = Explorer(target, step=-1)
                display(explorer)
            except Exception as exc:  # noqa: BLE001 - the summary is printed already; say why, no traceback
                print(f"(explorer not shown: {type(exc).__name__}: {exc})")
                continue
            shown.append(explorer)
        return shown


def _page_bundle(trace: Any) -> dict:
    """The standalone explorer page of `trace` in an iframe (text/html), and a line of text."""
    import html

    from cgviz.views.html import to_html

    page = to_html(trace)
    counts = " · ".join(f"{v} {k}" for k, v in trace.counts().items() if v)
    return {
        "text/html": f'<iframe srcdoc="{html.escape(page)}" style="width:100%;height:820px;border:0" '
                     f'title="cgviz explorer"></iframe>',
        "text/plain": f"cgviz explorer: {plural(len(trace.steps), 'step')} ({counts or 'none'})",
    }


def _observe_torch() -> Optional[Callable]:
    """cgviz.observe_torch, where this version has it; None otherwise."""
    try:
        return cgviz.observe_torch
    except Exception:  # noqa: BLE001 - AttributeError, or a lazy import that failed
        pass
    for module in ("cgviz.observe", "cgviz.observe.torch_compile"):
        try:
            observe = getattr(importlib.import_module(module), "observe_torch", None)
        except Exception:  # noqa: BLE001
            continue
        if observe is not None:
            return observe
    return None


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext cgviz` (or `%load_ext cgviz.magics`): registers %%cudagraph and %cgviz."""
    ipython.register_magics(CudaGraphMagics)
