"""Tree: the warmup / record / execute state machine of CUDA graph trees, with generations.

All decisions live here, once, for every backend; each is recorded as a Step with its
reason. The rules follow torch/_inductor/cudagraph_trees.py:

* a function's first call warms up (eager, allocations in the pool); once a path is
  warming up, every call on it warms up until the path ends;
* later calls look for a child of the current node (the roots when there is none) whose
  invariants hold and replay it; otherwise they record a new child;
* a warming-up or recording path ends at the next call once all its outputs are dead; a
  replayed path only at a call that no child of its current node takes;
* `mark_step()` starts a new generation, ends the path and invalidates its live outputs at
  once (torch: at the next call, and only on a warming-up or recording path; docs/engine.md);
* before a warmup after replays, or recording under a node that replayed, the allocator
  state saved after that node's recording is restored, the path's live outputs kept.

Its helpers lie beside it: arguments.py (checks of what users pass), places.py (memory per node
and function), path.py (the current path's outputs), tree_steps.py (the longer step reasons).
"""

from __future__ import annotations

import contextlib
import threading
import time
from threading import get_ident
from typing import Any, Callable, Iterator, Optional

import torch
from torch.utils._pytree import tree_flatten

from cgviz.engine.arguments import TRACE_LEVELS as TRACE_LEVELS, check_options, new_variant, wrap_arguments
from cgviz.engine.backend import NOT_NOW, CaptureUnsupported, make_backend
from cgviz.engine.function import TreeFunction, Variant, first_unsupported, grad_reason, signature_key
from cgviz.engine.node import Node
from cgviz.engine.path import OVERWRITTEN as OVERWRITTEN, invalidate_path, managed_inputs, path_liveness
from cgviz.engine.path import restore_checkpoint
from cgviz.engine.places import Places
from cgviz.engine.profile import Profiler, value_summary
from cgviz._torch import rules as R
from cgviz.engine import _torch_compat as compat
from cgviz.engine.recorder import Recorder
from cgviz.engine.registry import register
from cgviz.engine.steady import SteadyRoot, steady_root
from cgviz.engine.tree_steps import generation_reason, note_error, record_reason
from cgviz.trace.model import Step, safe_text


class Tree:
    """A CUDA graph tree: functions recorded into graphs sharing one memory pool.

    - device: "auto" (cuda when available, else sim), "sim", "cuda" or "cuda:N".
    - trace: None (record nothing), "events" (steps) or "full" (steps and a snapshot after each).
    - rules: decide as this torch release does ("2.11" … "2.15", see _torch/rules.py); None:
      the installed torch's. The torch options below are set on top of it; None leaves each
      as the release has it, and one the release lacks raises ValueError.
    - rerecord_limit: torch's cudagraph_unexpected_rerecord_limit (128): re-recordings of a
      function under one node before it runs eagerly there. Which re-recordings count, and
      whether the limit applies at all, depend on the release (none in 2.12, nor in 2.11 while
      dynamo's inline_inbuilt_nn_modules is on, its default).
    - shape_limit: distinct input signatures of one function that get graphs; more run eagerly
      (cgviz's own limit, for every release).
    - generation_cloning: "user_visible" (torch 2.14+'s cudagraph_trees_generation_cloning):
      mark_step() clones the live outputs of the path out of the pool (those of backward
      functions excepted) instead of invalidating them.
    - managed_input_rerecord_limit, managed_input_action: torch 2.15's
      cudagraph_managed_input_rerecord_limit (5) and _action ("copy" or "skip").
    - dynamic_shape_rerecord_limit: torch 2.15's cudagraph_dynamic_shape_rerecord_limit
      (None: no limit): past that many input signatures of a function, new ones run eagerly.
    - profile: time each replay and eager run (CUDA events on cuda, read without a sync per
      call) and keep each graph's kernels, in ``trace.meta["profile"]``; default: on at
      trace="full".
    - values: keep a small summary of every output's values after each run (first elements,
      min / max / mean, NaN and Inf counts) in the snapshots; needs trace="full"; costs a
      host sync per output.

    A tree may be called from several threads: calls are serialised (one runs at a time,
    the others wait), so no call sees another half done. A tree function called from inside
    another function of the same tree is part of the outer call (run within its warmup,
    captured within its graph), as torch.compile inlines it.
    """

    def __init__(
        self,
        device: str = "auto",
        *,
        trace: Optional[str] = "full",
        rules: Any = None,
        rerecord_limit: Optional[int] = None,
        shape_limit: int = 8,
        generation_cloning: Optional[str] = None,
        managed_input_rerecord_limit: Optional[int] = None,
        managed_input_action: Optional[str] = None,
        dynamic_shape_rerecord_limit: Optional[int] = None,
        name: Optional[str] = None,
        profile: Optional[bool] = None,
        values: bool = False,
    ) -> None:
        check_options(trace, profile, values, shape_limit, name)
        self.rules = R.configure(
            rules, rerecord_limit=rerecord_limit, generation_cloning=generation_cloning,
            managed_input_rerecord_limit=managed_input_rerecord_limit, managed_input_action=managed_input_action,
            dynamic_shape_rerecord_limit=dynamic_shape_rerecord_limit,
        )
        self.backend = make_backend(device)
        if self.rules.generation_cloning is not None:
            self.backend.check_cloning()
        self.name = name
        self.shape_limit = shape_limit
        self.functions: dict[str, TreeFunction] = {}
        self.nodes: list[Node] = []  # every node since the last reset(), warmup nodes included
        self._next_node_id = 0
        self.roots: dict[int, list[Node]] = {}
        self.current: Optional[Node] = None
        self.state = "none"  # "none" | "warmup" | "recording" | "execution"
        self.generation = 1
        self.pending_backward = 0
        self._variants: list[Variant] = []
        self._places = Places(self.rules, self.backend)  # re-records, managed moves, eager reasons per place
        self._warming: Optional[Variant] = None  # the variant warming up now (mark_warmup_incomplete)
        self._warmup_incomplete = False
        self._rewarm: set[int] = set()  # variants whose last warmup asked for another
        self._restored_at: Optional[Node] = None  # the node whose checkpoint the allocator holds now
        self._steady: Optional[SteadyRoot] = None  # the inference loop's shortcut (engine/steady.py)
        self._lock = threading.Lock()  # one call at a time; see _call
        self._running_on: Optional[int] = None  # the thread inside a call of this tree, if any
        self._holding: Optional[int] = None  # the thread holding the lock outside a call (_held), if any
        self._recorder = Recorder(self, trace)
        self._recorder.meta.update(self.backend.describe())
        self._recorder.meta["rules"] = self.rules.release
        if profile is None:
            profile = trace == "full"
        self._profiler = Profiler(self.backend.timer()) if profile else None
        self.backend.read_kernels = bool(profile)
        self.values = values
        register(self)  # weakly, so %%cudagraph can see every tree's steps

    # -- public API ---------------------------------------------------------------------------
    @property
    def trace(self):
        """The live Trace (grows with each step); with a profile, ``meta["profile"]`` is brought
        up to date (waiting for timings still running on the device). Read from another thread,
        it waits for a call of this tree in progress to end (the decisions it noted are logged
        when the trace is read); the Trace it returns is the live one, which the next call
        changes."""
        with self._held():
            if self._profiler is not None and self._profiler.dirty:
                self._recorder.meta["profile"] = self._profiler.table()
            return self._recorder.trace

    @property
    def rerecord_limit(self) -> Optional[int]:
        """The re-record limit in force now under the tree's rules (None: no limit)."""
        return R.limit_in_force(self.rules, compat.torch_inlines_nn_modules())

    @property
    def trace_level(self) -> Optional[str]:
        return self._recorder.level

    @property
    def device(self) -> torch.device:
        return self.backend.device

    def wrap(
        self,
        fn: Callable,
        static: Any = (),
        name: Optional[str] = None,
        mode: str = "inference",
    ) -> TreeFunction:
        """Make `fn` run through this tree. `static` lists inputs that keep their address
        (parameters, buffers); the others are copied into the graph's input buffers.
        `mode` is "inference", "forward" (its backward will follow) or "backward"."""
        name, static = wrap_arguments(fn, static, name, mode, self.functions)
        wrapped = TreeFunction(self, fn, name, static, mode)
        self.functions[name] = wrapped
        return wrapped

    def graphed(self, fn: Optional[Callable] = None, **options: Any):
        """Decorator form of wrap(): `@tree.graphed` or `@tree.graphed(static=(1,))`."""
        if fn is None:
            return lambda f: self.wrap(f, **options)
        return self.wrap(fn, **options)

    def mark_step(self) -> None:
        """Start a new generation: end the current path and invalidate its live outputs."""
        with self._between_calls("mark_step()"):
            self._mark_step()

    def _mark_step(self) -> None:
        start = self._clock()
        self._steady = None
        old = self.generation
        self.generation += 1
        cloned: list[tuple[int, int, int]] = []
        invalidated = invalidate_path(self.current, self.backend, self.rules, old, self.generation, cloned)
        pending = self.pending_backward
        self.pending_backward = 0
        self._end_path()
        if self._recorder.level is not None:
            reason = generation_reason(self.rules, old, self.generation, cloned, invalidated, pending)
            self._recorder.step("generation", reason, start=start, invalidated=[[n, o] for n, o in invalidated])

    def mark_warmup_incomplete(self) -> None:
        """Called from inside a function of this tree while it warms up: its next call warms up
        again (torch 2.14+'s mark_warmup_incomplete()); elsewhere it does nothing, as torch's."""
        if not self.rules.warmup_incomplete_available:
            raise RuntimeError(R.warmup_incomplete_error(self.rules))
        if self._warming is not None and self._running_on == get_ident():
            self._warmup_incomplete = True

    def reset(self) -> None:
        """Forget every node and graph (outputs handed out stay valid); the trace is kept,
        with a path_end step saying so, and node ids go on from where they were."""
        with self._between_calls("reset()"):
            self._reset()

    def _reset(self) -> None:
        start = self._clock()
        self._steady = None
        forgotten = len(self.nodes)
        self._end_path()
        self.nodes.clear()
        self.roots.clear()
        self._places.clear()
        self._rewarm.clear()
        for v in self._variants:
            v.warmed_up = v.limited = False
            v.refresh()
        self._recorder.step(
            "path_end",
            f"reset(): {forgotten} node(s) and their graphs forgotten; the next call of each function "
            f"warms up again, and new nodes are numbered from {self._next_node_id}",
            start=start,
        )

    def explain(self) -> str:
        from cgviz.engine.explain import explain

        with self._held():
            return safe_text(explain(self))

    def subscribe(self, fn: Callable[[Step], None]) -> Callable[[], None]:
        """Call `fn(step)` after each step the tree records, e.g. for a live viewer; while a
        folded block repeats, once per repetition, with the block's last step. Returns the
        function that stops it."""
        if not callable(fn):
            raise TypeError(f"subscribe needs a callable taking a step, not {type(fn).__name__}")
        with self._held():
            return self._recorder.subscribe(fn)

    def snapshot(self):
        """The tree's state now, as a trace Snapshot."""
        with self._held():
            return self._recorder.snapshot()

    def _held(self):
        """The lock, unless this thread holds it already: inside a call of this tree, or inside
        another operation that took it (explain() reads the trace)."""
        me = get_ident()
        if self._running_on == me or self._holding == me:
            return contextlib.nullcontext()
        return self._taken()

    def _between_calls(self, what: str):
        """The lock, for an operation that must not run inside a call of this tree."""
        if self._running_on == get_ident():
            raise RuntimeError(
                f"{what} was called from inside a function of this tree; call it between calls"
            )
        return self._held()

    @contextlib.contextmanager
    def _taken(self) -> Iterator[None]:
        with self._lock:
            self._holding = get_ident()
            try:
                yield
            finally:
                self._holding = None

    @property
    def _mutation_hints(self) -> dict:
        """Why functions that mutate inputs run eagerly, per place (read by engine/explain.py)."""
        return self._places.mutation_hints

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<cgviz.Tree{label} on {self.backend.name}: {len(self.nodes)} nodes, generation {self.generation}>"

    # -- the state machine --------------------------------------------------------------------
    def _call(self, fn: TreeFunction, args: tuple, kwargs: dict) -> Any:
        lock = self._lock
        if not lock.acquire(False):
            if self._running_on == get_ident():
                # called from inside another function of this tree: part of that call, run or
                # captured with it, as torch.compile inlines a compiled function called from one
                return fn.fn(*args, **kwargs)
            lock.acquire()  # another thread's call is running: wait for it
        self._running_on = get_ident()
        try:
            start = 0.0 if self._recorder.level is None else time.perf_counter()  # _clock(), inline
            try:
                steady = self._steady
                if steady is not None:
                    if steady.fn is fn and not kwargs and len(args) == steady.arity and steady.matches(*args):
                        outputs = self._replay_root_again(steady, args, start)
                        if outputs is not NOT_NOW:
                            return outputs
                    self._steady = None
                variant = fn.latest
                if kwargs or variant is None or variant.matches is None or len(args) != len(variant.key) \
                        or not variant.matches(*args):
                    key = None if kwargs else signature_key(args)
                    if key is None:
                        why = first_unsupported(args, kwargs, self.backend.unsupported_input)
                        return self._eager(fn, None, args, kwargs, f"{fn.name} runs eagerly: {why}", start)
                    variant = fn.latest = fn.variants.get(key) or self._new_variant(fn, args, key)
                if variant.grad_inputs and torch.is_grad_enabled():
                    reason = f"{fn.name} runs eagerly: {grad_reason(variant.grad_inputs[0])}"
                    return self._eager(fn, variant, args, {}, reason, start)
                if variant.eager_reason is not None:
                    return self._eager(fn, variant, args, {}, variant.eager_reason, start)
                return self._run(variant, args, start)
            except BaseException as exc:
                self._steady = None
                note_error(self._recorder, fn.name, exc, start)
                raise
        finally:
            self._running_on = None
            lock.release()

    def _replay_root_again(self, steady: SteadyRoot, args: tuple, start: float) -> Any:
        """The loop's call (engine/steady.py): the path ends, the root replays, as in _run; NOT_NOW while live."""
        node = steady.node
        if steady.replay is None:  # the tree's own steps (a profile, values, snapshots, or no faster replay)
            return self._execute(node, args, start) if self._try_end_path(start) else NOT_NOW
        try:
            outputs = steady.replay(args)
        except BaseException:
            self._path_ended(start)  # _run ends the path before it replays: a replay that raises leaves it so
            raise
        if outputs is NOT_NOW:
            return outputs
        node.replays += 1
        if self._recorder.level is not None:
            self._recorder.path_end(node, start)
            self._recorder.execute(node, start)
        return outputs

    def _new_variant(self, fn: TreeFunction, args: tuple, key: tuple) -> Variant:
        """The first call with this input signature: checked once (engine/arguments.py)."""
        variant = new_variant(fn, args, key, len(self._variants), self.backend.unsupported_input, self.rules,
                              self.shape_limit)
        self._variants.append(variant)
        return variant

    def _run(self, variant: Variant, args: tuple, start: float) -> Any:
        if self.state == "execution" and variant.fast:  # the replay loop's fast path
            candidates = self.current.children.get(variant.id)
            if candidates is None and variant.id in self.roots and not self.current.path_is_live():
                self._path_ended(start)
                candidates = self.roots[variant.id]
            for node in candidates or ():
                if not node.has_invariants or node.check_invariants(args, self.backend.address) is None:
                    outputs = self._execute(node, args, start)
                    if node.parent is None:  # the root again, its path dead: so may the next call be
                        own_steps = self._profiler is not None or self.values or self._recorder.level == "full"
                        self._steady = steady_root(variant, node, self.roots, self.backend, own_steps)
                    return outputs
        if self.state in ("recording", "warmup"):
            self._try_end_path(start)
        if variant.mutated or variant.limited:
            why = self._places.eager_reason(variant, args, self.current, self.rerecord_limit)
            if why is not None:
                return self._eager(variant.function, variant, args, {}, why, start)
        if not variant.warmed_up or self.state == "warmup":
            return self._warmup(variant, args, start)

        siblings = self.roots if self.current is None else self.current.children
        mismatches = []
        kinds = []
        if self.state != "recording":
            for child in siblings.get(variant.id, ()):
                mismatch = child.check_invariants(args, self.backend.address)
                if mismatch is None:
                    return self._execute(child, args, start)
                mismatches.append(f"node {child.id} can't replay: {mismatch.reason}")
                kinds.append(mismatch.kind)
            if self.current is not None and variant.id in self.roots:
                if self._try_end_path(start):
                    return self._run(variant, args, start)
            if variant.mutated:
                why = self._places.mutation_hint(variant, args, self.current, refresh=True)
                if why is not None:
                    return self._eager(variant.function, variant, args, {}, why, start)
            place = (None if self.current is None else self.current.id, variant.id)
            skip = self._places.count_managed_moves(place, variant, args, siblings.get(variant.id), mismatches)
            counts, limit = R.counted(self.rules, kinds), self.rerecord_limit
            if counts:
                self._places.rerecords[place] += 1
            if skip is not None or (counts and R.exceeded(self._places.rerecords[place], limit)):
                variant.limited = True
                variant.refresh()
                why = skip or self._places.limit_reason(variant, self.current, limit, mismatches[-1])
                return self._eager(variant.function, variant, args, {}, why, start)
            if kinds:
                where = "as a root" if place[0] is None else f"under node {place[0]}"
                mismatches.append(R.rerecord_note(self.rules, kinds, self._places.rerecords[place], limit, where))
            self._try_end_path(start)
            if self.current is not None and self.state == "execution":
                self._restore_checkpoint()
        return self._record(variant, args, mismatches, start)

    def _try_end_path(self, start: float) -> bool:
        """End the current path if all its outputs are dead."""
        if self.current is None:
            return False
        if self.current.path_is_live():
            return False
        self._path_ended(start)
        return True

    def _clock(self) -> float:
        """A step's start: durations are only kept in steps, so an untraced tree reads no clock."""
        return 0.0 if self._recorder.level is None else time.perf_counter()

    def _path_ended(self, start: float) -> None:
        ended = self.current
        self._end_path()
        if self._recorder.level is not None:
            self._recorder.path_end(ended, start)

    def _end_path(self) -> None:
        self.current = None
        self.state = "none"
        self._restored_at = None

    def _restore_checkpoint(self) -> None:
        """Before recording after replays: the allocator as after the current node's recording.

        Done once per replay: when the run after it raised, the allocator already holds the
        checkpoint and the path's live outputs, and restoring again would free them twice.
        """
        node = self.current
        if self._restored_at is node:
            return
        start = self._clock()
        reason = restore_checkpoint(node, self.backend)
        self._restored_at = node
        self._recorder.step("checkpoint_restore", reason, node=node.id, start=start)

    def _warmup(self, variant: Variant, args: tuple, start: float) -> Any:
        if self.state == "execution":
            self._restore_checkpoint()
        fn = variant.function
        prof = self._profiler
        token = prof.start() if prof is not None else None
        self._warming, self._warmup_incomplete = variant, False
        try:
            result = self.backend.warmup(fn.fn, args)
        finally:
            self._warming = None
        if prof is not None:
            prof.ran_eagerly(variant.id, token, first=not variant.warmed_up)
        node = self._add_node("warmup", variant, result.leaves)
        self._keep_values(node, result.outputs)
        if variant.id in self._rewarm:
            reason = f"{variant.described} asked for another warmup (mark_warmup_incomplete()): run eagerly again"
        elif not variant.warmed_up:
            reason = f"first call of {variant.described}: run eagerly so lazy initialisation happens outside capture"
        else:
            reason = f"the path is warming up (node {node.parent.id}): calls on it warm up until the path ends"
        variant.warmed_up = not self._warmup_incomplete
        self._rewarm.discard(variant.id)
        if self._warmup_incomplete:
            self._rewarm.add(variant.id)
            reason += (
                f"; it called mark_warmup_incomplete() ({R.span(self.rules, 'warmup_incomplete_available')}), "
                "so its next call warms up again"
            )
        if result.capture_blocker is not None:
            variant.eager_reason = f"{variant.label} runs eagerly: {result.capture_blocker}"
            reason += f"; later calls run eagerly because {result.capture_blocker}"
        new = result.mutated - variant.mutated - set(fn.static)
        if new:
            variant.mutated |= result.mutated
            idx = ", ".join(str(i) for i in sorted(new))
            reason += (
                f"; it mutates input {idx} in place, so it is graphed only where that input is static or an "
                "output of the current path, and runs eagerly elsewhere"
            )
        variant.refresh()
        self.state = "warmup"
        self._track_mode(fn)
        parent = None if node.parent is None else node.parent.id
        self._recorder.step("warmup", reason, function=variant.label, node=node.id, parent=parent, start=start)
        return result.outputs

    def _record(self, variant: Variant, args: tuple, mismatches: list[str], start: float) -> Any:
        fn = variant.function
        parent = self.current
        managed = managed_inputs(parent, args, self.backend.address)
        demoted = self._places.demoted.get((None if parent is None else parent.id, variant.id))
        if demoted:  # torch 2.15, action "copy": copied like any other input, its address unchecked
            managed = {i: m for i, m in managed.items() if i not in demoted}
        copy = tuple(i for i in range(len(args)) if i not in fn.static and i not in managed)
        live_before = path_liveness(parent)
        try:
            result = self.backend.record(fn.fn, args, copy)
        except CaptureUnsupported as exc:
            variant.eager_reason = f"{variant.label} runs eagerly: {exc}"
            return self._eager(fn, variant, args, {}, variant.eager_reason, start)
        node = self._add_node("graph", variant, result.leaves)
        if self._profiler is not None:
            self._profiler.kernels_read(node, result.kernels)
        self._keep_values(node, result.outputs)
        node.graph = result.graph
        node.copy_inputs = copy
        node.static_addresses = {i: self.backend.address(args[i]) for i in fn.static}
        node.managed_addresses = managed
        node.dead_before = [(n, i) for n, i, alive in live_before if not alive]
        node.tracks_mode = fn.mode != "inference"
        node.has_invariants = bool(node.static_addresses or node.managed_addresses or node.dead_before)
        node.live_after = [(n, i) for n, i, alive in live_before if alive] + [
            (node, i) for i, leaf in enumerate(node.leaves) if leaf.ref is not None and leaf.alias_of is None
        ]
        node.input_buffers = result.input_buffers or {}
        node.checkpoint = self.backend.checkpoint()
        self.state = "recording"
        reason = record_reason(variant, parent, mismatches, live_before, self.pending_backward)
        self._recorder.step(
            "record", reason, function=variant.label, node=node.id, parent=None if parent is None else parent.id, start=start
        )
        self._track_mode(fn)
        return result.outputs

    def _execute(self, node: Node, args: tuple, start: float) -> Any:
        prof = self._profiler
        if prof is None or not prof.times(node):
            outputs, refs = self.backend.replay(node.graph, args, node.copy_inputs)
        else:
            token = prof.start()
            outputs, refs = self.backend.replay(node.graph, args, node.copy_inputs)
            prof.replayed(node, token)
        if self.values:
            self._keep_values(node, outputs)
        if refs is not node.refs:  # backends hand out the same list while outputs are cached
            node.refs = refs
            for leaf, ref in zip(node.leaves, refs):
                leaf.ref = ref
        if node.invalid:
            node.invalid = set()
        node.replays += 1
        self.current = node
        self.state = "execution"
        self._restored_at = None
        if node.tracks_mode:
            self._track_mode(node.variant.function)
        if self._recorder.level is not None:
            self._recorder.execute(node, start)
        return outputs

    def _eager(self, fn: TreeFunction, variant: Optional[Variant], args: tuple, kwargs: dict, reason: str, start: float):
        prof = self._profiler if variant is not None else None
        token = prof.start() if prof is not None else None
        out = fn.fn(*args, **kwargs)
        if prof is not None:
            prof.ran_eagerly(variant.id, token)
        self._recorder.step("eager", reason, function=variant.label if variant else fn.name, start=start)
        return out

    # -- helpers ------------------------------------------------------------------------------
    def _add_node(self, kind: str, variant: Variant, leaves) -> Node:
        parent = self.current
        node = Node(self._next_node_id, kind, variant, parent, self.generation, leaves)
        self._next_node_id += 1
        self.nodes.append(node)
        if self._profiler is not None:
            self._profiler.node_added(node)
        self._restored_at = None
        if kind == "graph":
            siblings = self.roots if parent is None else parent.children
            siblings.setdefault(variant.id, []).append(node)
        elif parent is not None:
            parent.warmups.append(node)
        self.current = node
        return node

    def _keep_values(self, node: Node, outputs: Any) -> None:
        """With values=True: a small summary of each tensor output as this run left it."""
        if self.values:
            leaves = [t for t in tree_flatten(outputs)[0] if isinstance(t, torch.Tensor)]
            node.values = [value_summary(t) for t in leaves]

    def _track_mode(self, fn: TreeFunction) -> None:
        if fn.mode == "forward":
            self.pending_backward += 1
        elif fn.mode == "backward" and self.pending_backward:
            self.pending_backward -= 1
