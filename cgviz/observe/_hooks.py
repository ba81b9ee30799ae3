"""Installs and removes the observer's wrappers around torch's tree manager and compiler.

Each wrapper does exactly what torch's method does, passing every argument through as given
(releases add keyword arguments: 2.14's clear_current_path_state_and_set_to_none), reads torch
through `_torch_layout` and tells the active observers through one public event method.

torch's classes are changed once per process, at the first observation: the tree manager's
methods and the compile-time hooks (dynamo's frame converter and graph-break log, inductor's
scheduler and compiled graph) go in then and stay, each passing the call straight on while
nothing is observed. Neither way of putting them in and taking them out again leaves torch as
fast as this:
- assigning to a class about a thousand times makes it lose its attribute cache for good from
  Python 3.13 (CPython's MAX_VERSIONS_PER_CLASS): wrapping the manager's class and putting it
  back at every observation did that in some 60 observations;
- switching a manager's `__class__` to a subclass makes CPython (3.11 – 3.13) move the
  instance's attributes out of its inline values into a dict, for good: every attribute read in
  torch's manager code then took about three times as long, observed or not
  (`benchmarks/class_switch.py`).
Module functions, eager graphs' callables and log handlers are put back when the last
observation stops, by identity.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from cgviz.observe import _torch_layout as layout
from cgviz.observe.lookups import read
from cgviz.observe.graph_data import graph_kernels
from cgviz.observe.recorded_kernels import graphs_kept, instantiated_graph_data

if TYPE_CHECKING:
    from cgviz.observe.observer import TorchObserver

ACTIVE: list["TorchObserver"] = []
# Put back when the last observation stops: (owner, name, what the owner itself held).
_ORIGINALS: list[tuple[Any, str, Any]] = []
# Kept for the process once installed (see the module's docstring).
_CLASS_HOOKS: list[tuple[Any, str, Any]] = []
# Compiled graphs whose CUDA graphs torch skipped while observed: (the graph, or a weak
# reference to it; its own current_callable; the wrapper that sees its calls), put back at uninstall.
_EAGER_GRAPHS: list[tuple[Callable[[], Any], Any, Any]] = []
_LOG_HANDLERS: list[tuple[logging.Logger, logging.Handler]] = []
_ABSENT = object()  # a wrapped name the owner only inherited: deleted again at uninstall


def _arg(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    """A wrapped method's argument, given by position (index past self) or by name."""
    return args[index] if len(args) > index else kwargs.get(name)


def manager_hooks(cls: Any) -> list[tuple[str, str, Callable[[Callable], Callable]]]:
    """(role, method name, wrapper maker) for each of the manager's methods this torch has:
    _run where torch has it (run() is bound into each compiled function when torch first calls
    it, so a model compiled before observing began would bypass a wrapped run()), then
    HOOKED_METHODS."""
    hooks = [("run", layout.run_method(cls), wrap_run, "")] + [
        (role, name, WRAPPERS[role], f"{layout.MANAGER_CLASS}.{name}") for role, name in layout.HOOKED_METHODS.items()]
    found = []
    for role, name, make, since in hooks:
        if getattr(cls, name, None) is None:
            if not (since and not layout.has_since(since)):  # not a name this release lacks by design
                read(cls, name)  # says once that this torch lacks it
            continue
        found.append((role, name, make))
    return found


def hooked_roles() -> frozenset:
    """The roles (HOOKED_METHODS keys, "run", "post_compile") wrapped on this torch."""
    hooked = {(owner, name) for owner, name, _ in _CLASS_HOOKS}
    cls = layout.manager_class()
    roles = {role for role, name, _ in manager_hooks(cls) if (cls, name) in hooked}
    if any(name == layout.COMPILED_GRAPH_MEMBERS[0] for _, name in hooked):
        roles.add("post_compile")
    return frozenset(roles)


def _hook(owner: Any, name: str, make: Callable[[Callable], Callable], into: list) -> None:
    """Wrap `owner.name`. The wrapper answers introspection as torch's function does (name,
    qualified name, doc, and its signature through __wrapped__), but keeps this module's name:
    that is how a hook already in place is told apart."""
    original = getattr(owner, name, None)
    if original is None:
        read(owner, name)  # says once that this torch lacks it
        return
    into.append((owner, name, vars(owner).get(name, _ABSENT)))
    wrapper = functools.update_wrapper(make(original), original, assigned=("__name__", "__qualname__", "__doc__"),
                                       updated=())
    setattr(owner, name, wrapper)


def _put_back(entries: list) -> None:
    """Put back each (owner, name, original) wrapped, the newest first."""
    while entries:
        owner, name, original = entries.pop()
        if original is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


# -- the wrappers ---------------------------------------------------------------------------------
def wrap_run(original: Callable) -> Callable:
    def run(self, *args, **kwargs):
        if not ACTIVE or ACTIVE[-1].depth:  # torch's run() calling itself: the outer call watches
            return original(self, *args, **kwargs)
        return ACTIVE[-1].watch_call(original, self, args, kwargs)
    return run


def wrap_warmup(original: Callable) -> Callable:
    def run_eager(self, *args, **kwargs):
        if not ACTIVE:
            return original(self, *args, **kwargs)
        start = time.perf_counter()
        out = original(self, *args, **kwargs)
        node = layout.current_node(self)
        function_id = _arg(args, kwargs, 1, "function_id")
        for obs in ACTIVE:
            obs.warmed_up(self, function_id, node, start)
        return out
    return run_eager


def wrap_record(original: Callable) -> Callable:
    def record_function(self, *args, **kwargs):
        if not ACTIVE:
            return original(self, *args, **kwargs)
        new_inputs, function_id = _arg(args, kwargs, 0, "new_inputs"), _arg(args, kwargs, 1, "function_id")
        start = time.perf_counter()
        parent = self.current_node
        # why the existing children could not replay (asked again only now, off the replay path)
        mismatches = [] if read(self, "in_recording", False) else layout.replay_mismatches(
            self, parent, new_inputs, function_id)
        kernels = None
        if any(obs.read_kernels for obs in ACTIVE):
            with instantiated_graph_data() as data:  # 2.14+: a public hook, torch's graphs untouched
                with graphs_kept() if data is None else contextlib.nullcontext():
                    out = original(self, *args, **kwargs)
            node = layout.current_node(self)
            kernels = data[-1] if data else graph_kernels(read(node, "graph"))
        else:
            out = original(self, *args, **kwargs)
            node = layout.current_node(self)
        for obs in ACTIVE:
            obs.recorded(self, function_id, parent, node, mismatches, kernels, start)
        return out
    return record_function


def wrap_execute(original: Callable) -> Callable:
    def execute_node(self, node, *args, **kwargs):
        if not ACTIVE:
            return original(self, node, *args, **kwargs)
        start = None if ACTIVE[-1].level != "full" else time.perf_counter()
        out = original(self, node, *args, **kwargs)
        for obs in ACTIVE:
            obs.replayed(self, node, start)
        return out
    return execute_node


def wrap_checkpoint(original: Callable) -> Callable:
    def apply_checkpoint(self, *args, **kwargs):
        if not ACTIVE:
            return original(self, *args, **kwargs)
        start = time.perf_counter()
        out = original(self, *args, **kwargs)
        node = layout.current_node(self)
        for obs in ACTIVE:
            obs.checkpoint_restored(self, node, start)
        return out
    return apply_checkpoint


def wrap_path_clear(original: Callable) -> Callable:
    """torch calls clear_current_path_state_and_set_to_none() when an executing or recording path
    ends: for a new generation (a new invocation or a mark_step) or because all the path's
    outputs are dead. In an observed loop this runs on every call: the generation check is inline."""
    new_generation = layout.generation_check()

    def clear_current_path_state_and_set_to_none(self, *args, **kwargs):
        if not ACTIVE:
            return original(self, *args, **kwargs)
        if new_generation(self):
            out = original(self, *args, **kwargs)
            for obs in ACTIVE:
                obs.generation_began(self)
            return out
        before = self.current_node
        out = original(self, *args, **kwargs)
        for obs in ACTIVE:
            obs.path_ended(self, before)
        return out
    return clear_current_path_state_and_set_to_none


def wrap_end_warmup(original: Callable) -> Callable:
    """A warming-up path ends without clear_current_path_state_and_set_to_none()."""
    def try_end_curr_warmup(self, *args, **kwargs):
        if not ACTIVE:
            return original(self, *args, **kwargs)
        before = self.current_node
        new_generation = layout.starts_new_generation(self)
        out = original(self, *args, **kwargs)
        if before is not None and self.current_node is None:
            for obs in ACTIVE:
                if new_generation:
                    obs.generation_began(self)
                else:
                    obs.path_ended(self, before)
        return out
    return try_end_curr_warmup


def wrap_dealloc(original: Callable) -> Callable:
    def dealloc_current_path_weakrefs(self, *args, **kwargs):
        if ACTIVE:
            current = layout.current_node(self)
            for obs in ACTIVE:
                obs.path_deallocating(self, current)
        return original(self, *args, **kwargs)
    return dealloc_current_path_weakrefs


def wrap_warn(original: Callable) -> Callable:
    def check_warn_on_unable_to_start_executing(self, *args, **kwargs):
        if not ACTIVE:
            return original(self, *args, **kwargs)
        function_id = _arg(args, kwargs, 0, "function_id")
        warned = set(read(self, "warned_functions", set()) or ())
        out = original(self, *args, **kwargs)
        if function_id in (read(self, "warned_functions", set()) or ()) and function_id not in warned:
            for obs in ACTIVE:
                obs.pending_backward_warned()
        return out
    return check_warn_on_unable_to_start_executing


def wrap_add(original: Callable) -> Callable:
    """A new compiled graph enters the tree (and runs its first call): observed from its start."""
    def add_function(self, *args, **kwargs):
        observers = list(ACTIVE)
        for obs in observers:
            obs.adding(self)
        out = None
        try:
            out = original(self, *args, **kwargs)
        finally:
            function_id = layout.added_function_id(out)
            for obs in observers:
                obs.added(self, function_id)
        return out
    return add_function


def wrap_shutdown(original: Callable) -> Callable:
    """torch resets its trees: what the observers noted is made into steps first, and they let go."""
    def shutdown(self, *args, **kwargs):
        for obs in ACTIVE:
            obs.manager_shutting_down(self)
        return original(self, *args, **kwargs)
    return shutdown


def wrap_clone(original: Callable) -> Callable:
    """torch 2.14+ copies live user-visible outputs out of the pool at a generation boundary."""
    def clone_live_user_visible_storages(self, *args, **kwargs):
        if ACTIVE:
            found = layout.cloned_outputs(self, _arg(args, kwargs, 0, "storages_to_clone"))
            for obs in ACTIVE:
                obs.outputs_cloning(found)
        return original(self, *args, **kwargs)
    return clone_live_user_visible_storages


def wrap_warmup_incomplete(original: Callable) -> Callable:
    def mark_warmup_incomplete(self, *args, **kwargs):
        warming = read(self, "active_warmup_function") if ACTIVE else None
        out = original(self, *args, **kwargs)
        if warming is not None:
            for obs in ACTIVE:
                obs.warmup_incomplete(self, warming)
        return out
    return mark_warmup_incomplete


def wrap_managed_input_limit(original: Callable) -> Callable:
    """torch 2.15: inputs of a (node, function) edge that are outputs of the path keep moving."""
    def update_managed_input_rerecord(self, *args, **kwargs):
        if not ACTIVE:
            return original(self, *args, **kwargs)
        node_id, function_id = _arg(args, kwargs, 0, "node_id"), _arg(args, kwargs, 1, "function_id")
        demoted = layout.demoted_inputs(self, node_id, function_id)
        out = original(self, *args, **kwargs)
        action, limit = layout.managed_input_rule(self, function_id)
        limited = sorted(layout.demoted_inputs(self, node_id, function_id) - demoted) if action == "copy" \
            else sorted(out or ())
        if limited:
            for obs in ACTIVE:
                obs.managed_inputs_limited(limited, action, limit)
        return out
    return update_managed_input_rerecord


def wrap_skip_logger(original: Callable) -> Callable:
    def log_skip(msg, *args, **kwargs):
        for obs in ACTIVE:
            obs.skip_logged(str(msg))
        return original(msg, *args, **kwargs)
    return log_skip


COMPILING: list[str] = []  # the functions dynamo is compiling now, innermost last


def wrap_convert_frame(original: Callable) -> Callable:
    """dynamo compiles a frame: its function names the graphs compiled meanwhile."""
    def convert_frame(self, frame, *args, **kwargs):
        if not ACTIVE:
            return original(self, frame, *args, **kwargs)
        COMPILING.append(layout.frame_function_name(frame))
        try:
            return original(self, frame, *args, **kwargs)
        finally:
            COMPILING.pop()
    return convert_frame


def wrap_graph_break(original: Callable) -> Callable:
    """dynamo broke the graph it was tracing: where in the user's code, and why."""
    def log_graph_break(self, *args, **kwargs):
        if ACTIVE and not getattr(_arg(args, kwargs, 2, "exc"), "logged", False):
            site = layout.graph_break_site(self, args, kwargs)
            if site is not None:
                for obs in ACTIVE:
                    obs.graph_break(*site)
        return original(self, *args, **kwargs)
    return log_graph_break


def wrap_partitions(original: Callable) -> Callable:
    """inductor split a graph into partitions: the ops it kept out of CUDA graphs, and why."""
    def log_graph_partitions(self, *args, **kwargs):
        if ACTIVE:
            found = layout.partition_cuts(self, args, kwargs)
            if found is not None and found[1]:
                for obs in ACTIVE:
                    obs.partitioned(layout.current_compile_id(), COMPILING[-1] if COMPILING else "", *found)
        return original(self, *args, **kwargs)
    return log_graph_partitions


def wrap_post_compile(original: Callable) -> Callable:
    """A compiled graph is made ready: if torch turned its CUDA graphs off, see its calls."""
    def post_compile(self, *args, **kwargs):
        asked = bool(ACTIVE) and layout.cudagraphs_asked(args, kwargs)
        out = original(self, *args, **kwargs)
        if ACTIVE:
            turned_off = layout.cudagraphs_turned_off(args, kwargs)
            silent = layout.silent_skip(self) if asked and turned_off else None
            compile_id = layout.current_compile_id()
            frame = COMPILING[-1] if COMPILING else ""
            joined = [j for j in (obs.compiled(self, compile_id, turned_off, silent, frame) for obs in ACTIVE) if j]
            if joined:
                _watch_eager_graph(self, *joined[0])
        return out
    return post_compile


WRAPPERS: dict[str, Callable[[Callable], Callable]] = {
    "warmup": wrap_warmup, "record": wrap_record, "execute": wrap_execute, "checkpoint": wrap_checkpoint,
    "path_clear": wrap_path_clear, "end_warmup": wrap_end_warmup, "dealloc": wrap_dealloc, "warn": wrap_warn,
    "add": wrap_add, "shutdown": wrap_shutdown, "clone": wrap_clone,
    "warmup_incomplete": wrap_warmup_incomplete, "managed_input_limit": wrap_managed_input_limit,
}


class _DynamicShapeLimit(logging.Handler):
    """torch 2.15 says once per graph, through its trees' logger, that new shapes run eagerly."""

    def emit(self, record: logging.LogRecord) -> None:
        if layout.DYNAMIC_SHAPE_LIMIT not in str(record.msg) or len(record.args or ()) < 3:
            return
        compile_id, mode, limit = (str(a) for a in record.args[:3])
        for obs in ACTIVE:
            obs.dynamic_shape_limit(compile_id, mode, limit)


def install() -> None:
    """Start observing for the observers in ACTIVE: the hooks on torch's classes (once per
    process), the skip logger; on a failure, nothing stays observed."""
    try:
        _install_class_hooks()
        for module_name in layout.SKIP_LOGGER_MODULES:
            module = sys.modules.get(module_name)
            if module is not None and hasattr(module, layout.SKIP_LOGGER):
                _hook(module, layout.SKIP_LOGGER, wrap_skip_logger, _ORIGINALS)
        if layout.has_since("triton.cudagraph_dynamic_shape_rerecord_limit"):
            logger, handler = logging.getLogger(layout.TREES_LOGGER), _DynamicShapeLimit(logging.WARNING)
            logger.addHandler(handler)
            _LOG_HANDLERS.append((logger, handler))
    except BaseException:
        uninstall()
        raise


def _install_class_hooks() -> None:
    """The hooks on torch's classes: each method is wrapped once per process (see the module's
    docstring), the first time an observation finds it unwrapped (again where it was replaced
    since); all or none."""
    manager = layout.manager_class()
    targets = [(manager, name, make) for _, name, make in manager_hooks(manager)]
    converter = layout.convert_frame_class()
    if converter is not None and layout.CONVERT_FRAME[2] in vars(converter):
        targets.append((converter, layout.CONVERT_FRAME[2], wrap_convert_frame))
    scheduler = layout.scheduler_class()
    if scheduler is not None and hasattr(scheduler, layout.PARTITIONS[2]):
        targets.append((scheduler, layout.PARTITIONS[2], wrap_partitions))
    translator = layout.graph_break_class()
    if translator is not None and hasattr(translator, layout.GRAPH_BREAK[2]):
        targets.append((translator, layout.GRAPH_BREAK[2], wrap_graph_break))
    graph_cls = layout.compiled_graph_class()
    if graph_cls is not None:
        targets.append((graph_cls, layout.COMPILED_GRAPH_MEMBERS[0], wrap_post_compile))
    done: list = []
    try:
        for owner, name, make in targets:
            if getattr(vars(owner).get(name), "__module__", None) != __name__:  # not hooked yet
                _hook(owner, name, make, done)
    except BaseException:
        _put_back(done)
        raise
    _CLASS_HOOKS.extend(done)


def _watch_eager_graph(graph: Any, label: str, reason: str) -> None:
    """Each call of a compiled graph whose CUDA graphs torch turned off becomes an eager step
    (its calls never reach the tree manager); the graph's own callable is put back at uninstall."""
    attribute = layout.COMPILED_GRAPH_MEMBERS[1]
    original = getattr(graph, attribute, None)
    if original is None:
        return

    def current_callable(inputs):
        if not ACTIVE:
            return original(inputs)
        start = time.perf_counter()
        out = original(inputs)
        for obs in ACTIVE:
            obs.eager_graph_called(label, reason, start)
        return out

    setattr(graph, attribute, current_callable)
    try:
        ref: Callable[[], Any] = weakref.ref(graph)
    except TypeError:
        ref = lambda: graph  # noqa: E731  (kept until uninstall)
    _EAGER_GRAPHS.append((ref, original, current_callable))


def uninstall() -> None:
    """Stop observing: every module function, eager graph callable and log handler put back (the
    hooks on torch's classes stay, passing calls straight on)."""
    _put_back(_ORIGINALS)
    attribute = layout.COMPILED_GRAPH_MEMBERS[1]
    while _EAGER_GRAPHS:
        ref, original, wrapper = _EAGER_GRAPHS.pop()
        graph = ref()
        if graph is not None and getattr(graph, attribute, None) is wrapper:
            setattr(graph, attribute, original)
    while _LOG_HANDLERS:
        logger, handler = _LOG_HANDLERS.pop()
        logger.removeHandler(handler)

