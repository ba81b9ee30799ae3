"""Tree: the warmup / record / execute state machine of CUDA graph trees, with generations.

All decisions live here, once, for every backend; each is recorded as a Step with its
reason. The rules follow torch/_inductor/cudagraph_trees.py:

* a function's first call warms up (eager, allocations in the pool); once a path is
  warming up, every call on it warms up until the path ends;
* later calls look for a child of the current node (a root when nothing is live) whose
  invariants hold and replay it; otherwise they record a new child;
* the path ends when all its outputs are dead; `mark_step()` starts a new generation,
  ends the path and invalidates the outputs still live on it;
* before recording or warming up after replays, the allocator state saved after the
  current node's recording is restored, with the path's live outputs kept.
"""

from __future__ import annotations

import contextlib
import threading
import time
from threading import get_ident
import warnings
from collections import Counter
from typing import Any, Callable, Optional

import torch
from torch.utils._pytree import tree_flatten

from cgviz.engine.backend import CaptureUnsupported, describe_exception, make_backend
from cgviz.engine.function import (
    MODES,
    TreeFunction,
    Variant,
    check_static,
    describe_signature,
    first_unsupported,
    grad_reason,
    signature_key,
)
from cgviz.engine.node import Node
from cgviz.engine.profile import Profiler, value_summary
from cgviz.engine import rules as R
from cgviz.engine.recorder import Recorder
from cgviz.engine.registry import register
from cgviz.trace.model import Step, safe_text

TRACE_LEVELS = (None, "events", "full")

OVERWRITTEN = "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run"


class Tree:
    """A CUDA graph tree: functions recorded into graphs sharing one memory pool.

    - device: "auto" (cuda when available, else sim), "sim", "cuda" or "cuda:N".
    - trace: None (record nothing), "events" (steps) or "full" (steps and a snapshot after each).
    - rules: decide as this torch release does ("2.11" … "2.15", see engine/rules.py); None:
      the installed torch's. The torch options below are set on top of it; None leaves each
      as the release has it, and one the release lacks raises ValueError.
    - rerecord_limit: torch's cudagraph_unexpected_rerecord_limit (128): re-recordings of a
      function under one node before it runs eagerly there. Which re-recordings count, and
      whether the limit applies at all, depend on the release (none in 2.12).
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
        if trace not in TRACE_LEVELS:
            raise ValueError(f"trace must be one of None, 'events', 'full', not {trace!r}")
        for arg, value in (("profile", profile), ("values", values)):
            if value is not None and not isinstance(value, bool):
                raise TypeError(f"{arg} must be True or False, not {type(value).__name__} ({value!r})")
        if values and trace != "full":
            raise ValueError(f"values=True keeps output values in snapshots: it needs trace='full', not {trace!r}")
        if not isinstance(shape_limit, int) or isinstance(shape_limit, bool):
            raise TypeError(f"shape_limit must be an int, not {type(shape_limit).__name__} ({shape_limit!r})")
        if shape_limit < 0:
            raise ValueError(f"shape_limit must be a non-negative int, not {shape_limit!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a string or None, not {type(name).__name__}")
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
        self._rerecords: Counter = Counter()  # (parent id, variant id) -> re-records counted there
        # torch 2.15, per (parent id, variant id): moves counted per input, inputs copied from now on,
        # and why the place runs eagerly (action "skip")
        self._managed_moves: dict[tuple[Optional[int], int], dict[int, int]] = {}
        self._demoted: dict[tuple[Optional[int], int], frozenset[int]] = {}
        self._skips: dict[tuple[Optional[int], int], str] = {}
        self._warming: Optional[Variant] = None  # the variant warming up now (mark_warmup_incomplete)
        self._warmup_incomplete = False
        self._rewarm: set[int] = set()  # variants whose last warmup asked for another
        # (node id, variant id) -> why a function that mutates inputs runs eagerly there, or None
        self._mutation_hints: dict[tuple[Optional[int], int], Optional[str]] = {}
        self._restored_at: Optional[Node] = None  # the node whose checkpoint the allocator holds now
        self._lock = threading.Lock()  # one call at a time; see _call
        self._running_on: Optional[int] = None  # the thread inside a call of this tree, if any
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
        up to date (waiting for timings still running on the device)."""
        if self._profiler is not None and self._profiler.dirty:
            self._recorder.meta["profile"] = self._profiler.table()
        return self._recorder.trace

    @property
    def rerecord_limit(self) -> Optional[int]:
        """The re-record limit in force now under the tree's rules (None: no limit)."""
        return R.limit_in_force(self.rules, R.torch_inlines_nn_modules())

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
        if not callable(fn):
            raise TypeError(f"wrap() needs a callable, not {type(fn).__name__}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        static = check_static(static)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a string, not {type(name).__name__}")
        if name == "":
            raise ValueError("name must not be empty (leave it out to use the function's __name__)")
        base = name or getattr(fn, "__name__", None)
        if not isinstance(base, str) or not base:
            base = "fn"
        base = safe_text(base)  # shown and saved everywhere: must be valid UTF-8
        name, k = base, 2
        while name in self.functions:
            name, k = f"{base}_{k}", k + 1
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
        start = time.perf_counter()
        old = self.generation
        self.generation += 1
        cloned: list[tuple[int, int, int]] = []
        invalidated = self._invalidate_path(old, cloned) if self.current is not None else []
        pending = self.pending_backward
        self.pending_backward = 0
        self._end_path()
        reason = f"mark_step(): generation {old} ends, generation {self.generation} begins"
        if self.rules.generation_cloning is not None:
            reason += R.cloning_note(self.rules, cloned, invalidated)
        if invalidated:
            names = ", ".join(f"output {o} of node {n}" for n, o in invalidated)
            reason += f"; still-live {names} invalidated (clone outputs you keep across generations)"
        elif not cloned:
            reason += "; nothing live was invalidated"
        if pending:
            reason += f"; {pending} forward(s) still had a pending backward, whose saved outputs are now invalid"
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
        start = time.perf_counter()
        forgotten = len(self.nodes)
        self._end_path()
        self.nodes.clear()
        self.roots.clear()
        self._rerecords.clear()
        self._mutation_hints.clear()
        self._managed_moves.clear()
        self._demoted.clear()
        self._skips.clear()
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
        """Call `fn(step)` after each step the tree records (a folded repeat passes its block's
        last step), e.g. for a live viewer; returns the function that stops it."""
        if not callable(fn):
            raise TypeError(f"subscribe needs a callable taking a step, not {type(fn).__name__}")
        return self._recorder.subscribe(fn)

    def snapshot(self):
        """The tree's state now, as a trace Snapshot."""
        with self._held():
            return self._recorder.snapshot()

    def _held(self):
        """The lock, unless this thread is inside a call of this tree and so holds it already."""
        return contextlib.nullcontext() if self._running_on == get_ident() else self._lock

    def _between_calls(self, what: str):
        """The lock, for an operation that must not run inside a call of this tree."""
        if self._running_on == get_ident():
            raise RuntimeError(
                f"{what} was called from inside a function of this tree; call it between calls"
            )
        return self._lock

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
            # durations are only recorded in steps: no clock reading when nothing is traced
            start = 0.0 if self._recorder.level is None else time.perf_counter()
            try:
                key = None if kwargs else signature_key(args)
                if key is None:
                    why = first_unsupported(args, kwargs, self.backend.unsupported_input)
                    return self._eager(fn, None, args, kwargs, f"{fn.name} runs eagerly: {why}", start)
                variant = fn.variants.get(key) or self._new_variant(fn, args, key)
                if variant.grad_inputs and torch.is_grad_enabled():
                    reason = f"{fn.name} runs eagerly: {grad_reason(variant.grad_inputs[0])}"
                    return self._eager(fn, variant, args, {}, reason, start)
                if variant.eager_reason is not None:
                    return self._eager(fn, variant, args, {}, variant.eager_reason, start)
                return self._run(variant, args, start)
            except BaseException as exc:
                self._note_error(fn.name, exc, start)
                raise
        finally:
            self._running_on = None
            lock.release()

    def _note_error(self, label: str, exc: BaseException, start: float) -> None:
        """An error step for an exception on its way to the caller; recording it never replaces it."""
        try:
            self._recorder.step(
                "error", f"{label} raised {describe_exception(exc)}; no node was added", function=label, start=start
            )
        except Exception as failure:  # the user's exception goes on unchanged
            warnings.warn(f"cgviz could not record the error step of {label}: {describe_exception(failure)}",
                          stacklevel=3)

    def _new_variant(self, fn: TreeFunction, args: tuple, key: tuple) -> Variant:
        """The first call with this input signature: check what can be checked once."""
        for i in fn.static:
            if i >= len(args):
                raise IndexError(f"{fn.name}: static input index {i} is out of range for {len(args)} inputs")
        variant = Variant(len(self._variants), fn, key, describe_signature(args))
        variant.grad_inputs = tuple(i for i, a in enumerate(args) if a.requires_grad)
        why = first_unsupported(args, {}, self.backend.unsupported_input, check_grad=False)
        if why is not None:
            variant.eager_reason = f"{fn.name} runs eagerly: {why}"
        elif (why := R.signature_limit_reason(
            self.rules, fn.name, fn.graphed_signatures, self.shape_limit, variant.signature
        )) is not None:
            variant.eager_reason = why
        else:
            fn.graphed_signatures += 1
        fn.variants[key] = variant
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
                    return self._execute(node, args, start)
        if self.state in ("recording", "warmup"):
            self._try_end_path(start)
        if variant.mutated or variant.limited:
            why = self._eager_here(variant, args)
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
                why = self._mutation_hint(variant, args, refresh=True)
                if why is not None:
                    return self._eager(variant.function, variant, args, {}, why, start)
            place = (None if self.current is None else self.current.id, variant.id)
            skip = self._count_managed_moves(place, variant, args, siblings.get(variant.id), mismatches)
            counts, limit = R.counted(self.rules, kinds), self.rerecord_limit
            if counts:
                self._rerecords[place] += 1
            if skip is not None or (counts and R.exceeded(self._rerecords[place], limit)):
                variant.limited = True
                variant.refresh()
                why = skip or self._limit_reason(variant, mismatches[-1])
                return self._eager(variant.function, variant, args, {}, why, start)
            if kinds:
                where = "as a root" if place[0] is None else f"under node {place[0]}"
                mismatches.append(R.rerecord_note(self.rules, kinds, self._rerecords[place], limit, where))
            self._try_end_path(start)
            if self.current is not None and self.state == "execution":
                self._restore_checkpoint()
        return self._record(variant, args, mismatches, start)

    def _eager_here(self, variant: Variant, args: tuple) -> Optional[str]:
        """Why `variant` runs eagerly at the current place of the tree, or None (torch decides
        this per node and function, before warming up or replaying)."""
        place = None if self.current is None else self.current.id
        if variant.limited:
            if (place, variant.id) in self._skips:
                return self._skips[place, variant.id]
            if R.exceeded(self._rerecords[place, variant.id], self.rerecord_limit):
                return self._limit_reason(variant, "the limit was reached here before")
        if variant.mutated:
            return self._mutation_hint(variant, args, refresh=False)
        return None

    def _mutation_hint(self, variant: Variant, args: tuple, refresh: bool) -> Optional[str]:
        """Whether `variant` must run eagerly here because it writes an input in place that is
        neither static nor an output of the current path: a graph would write its recorded copy,
        not the caller's tensor. Decided at the first call at each place, and again when no
        recorded child takes the call (as torch's non_cudagraph_managed_mutation_hint)."""
        place = (None if self.current is None else self.current.id, variant.id)
        if not refresh and place in self._mutation_hints:
            return self._mutation_hints[place]
        fn = variant.function
        managed = self._managed_inputs(args)
        unmanaged = sorted(i for i in variant.mutated if i not in fn.static and i not in managed)
        why = None
        if unmanaged:
            idx = ", ".join(str(i) for i in unmanaged)
            where = "as a root" if place[0] is None else f"under node {place[0]}"
            why = (
                f"{variant.label} runs eagerly {where}: it mutates input {idx} in place, which here is neither "
                "static nor an output of the current path; a graph would mutate its recorded copy instead "
                "(pass the input as static, or hand it an output of the tree)"
            )
        self._mutation_hints[place] = why
        return why

    def _limit_reason(self, variant: Variant, mismatch: str) -> str:
        place = None if self.current is None else self.current.id
        where = "as a root" if place is None else f"under node {place}"
        return R.limit_reason(self.rules, variant.label, where, self.rerecord_limit, mismatch)

    def _count_managed_moves(self, place, variant: Variant, args: tuple, children, notes: list[str]) -> Optional[str]:
        """torch 2.15: count the inputs that were outputs of the path when the latest graph here
        was recorded and have moved since; note the count (or a demotion to copying) in `notes`
        and return why the place runs eagerly from now on (action "skip"), or None."""
        if self.rules.managed_input_rerecord_limit is None or not children:
            return None
        latest = children[-1]  # as torch: older graphs must not keep charging inputs that settled
        returned = {leaf.alias_of for leaf in latest.leaves}
        owners = {
            i: f"output {out} of node {node_id}"
            for i, (recorded, node_id, out) in latest.managed_addresses.items()
            if self.backend.address(args[i]) != recorded
            and R.copyable(bool(variant.mutated), i in variant.function.static, f"input {i}" in returned)
        }
        if not owners:
            return None
        moves = R.count_managed_moves(
            self.rules, self._managed_moves.get(place, {}), self._demoted.get(place, ()), owners
        )
        self._managed_moves[place], self._demoted[place] = dict(moves.counts), moves.demoted
        where = f"under node {place[0]}"
        if moves.reached:
            self._skips[place] = R.managed_skip_reason(self.rules, variant.label, moves, owners, where)
            return self._skips[place]
        notes.append(R.managed_note(self.rules, moves, owners, owners, where))
        return None

    def _try_end_path(self, start: float) -> bool:
        """End the current path if all its outputs are dead."""
        if self.current is None:
            return False
        if self.current.path_is_live():
            return False
        self._path_ended(start)
        return True

    def _path_ended(self, start: float) -> None:
        ended = self.current
        self._end_path()
        if self._recorder.level is not None:
            ids = "→".join(str(n.id) for n in ended.path)
            reason = f"all outputs of path {ids} are dead; the next call starts from the roots"
            self._recorder.step("path_end", reason, start=start)

    def _end_path(self) -> None:
        self.current = None
        self.state = "none"
        self._restored_at = None

    def _invalidate_path(self, old_generation: int, cloned: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        """Invalidate the live outputs of the path, or, with generation cloning (torch 2.14+),
        clone them out of the pool (those of backward functions excepted) into `cloned`."""
        invalidated = []
        cloning = self.rules.generation_cloning is not None
        for node in self.current.path:
            for i in node.live_outputs():
                if cloning and node.variant.function.mode != "backward":
                    if node.leaves[i].alias_of is None:  # an alias moves with the output it aliases
                        cloned.append((node.id, i, self.backend.clone_out(node.leaves[i].ref)))
                    continue
                invalidated.append((node.id, i))
                node.invalid.add(i)
                if node.leaves[i].alias_of is not None:
                    continue  # shares its storage with the output it aliases, invalidated with it
                message = (
                    f"{OVERWRITTEN}: output {i} of {node.variant.label} (node {node.id}, generation "
                    f"{old_generation}) was invalidated when mark_step() began generation {self.generation}. "
                    "Clone it (y.clone()) before the next generation to keep it."
                )
                node.leaves[i].ref.invalidate(message)
        return invalidated

    def _restore_checkpoint(self) -> None:
        """Before recording after replays: the allocator as after the current node's recording.

        Done once per replay: when the run after it raised, the allocator already holds the
        checkpoint and the path's live outputs, and restoring again would free them twice.
        """
        node = self.current
        if self._restored_at is node:
            return
        start = time.perf_counter()
        live = [
            (n.leaves[i].address, n.leaves[i].ref)
            for n in node.path
            for i in n.live_outputs()
            if n.leaves[i].alias_of is None
        ]
        dead = list(dict.fromkeys(n.leaves[i].address for n, i in node.live_after if not n.output_alive(i)))
        self.backend.restore(node.checkpoint, live, dead)
        self._restored_at = node
        self._recorder.step(
            "checkpoint_restore",
            f"allocator state saved after recording node {node.id} restored, keeping {len(live)} live "
            f"output(s) of the path and freeing {len(dead)} that died since, so a new recording "
            "does not overwrite live memory",
            node=node.id,
            start=start,
        )

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
        managed = self._managed_inputs(args)
        demoted = self._demoted.get((None if parent is None else parent.id, variant.id))
        if demoted:  # torch 2.15, action "copy": copied like any other input, its address unchecked
            managed = {i: m for i, m in managed.items() if i not in demoted}
        copy = tuple(i for i in range(len(args)) if i not in fn.static and i not in managed)
        live_before = self._path_liveness()
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
        where = "a new root (nothing on the path is live)" if parent is None else f"a new child of node {parent.id}"
        if mismatches:
            reason = "; ".join(mismatches) + f"; recording {where}"
        elif parent is None:
            reason = f"{variant.described} is warmed up and has no root graph yet; recording {where}"
        else:
            live = ", ".join(f"output {i} of node {n.id}" for n, i, alive in live_before if alive) or "nothing"
            reason = (f"no child for {variant.label} under node {parent.id}, the current node (the last graph run "
                      f"on the path; {live} live); recording {where}")
        if self.pending_backward and fn.mode == "forward" and parent is not None:
            reason += (
                f"; {self.pending_backward} forward(s) have a pending backward, whose saved outputs keep the "
                "path live: run the backward (or mark_step()) before the next forward to reach the replay path"
            )
        self._recorder.step(
            "record", reason, function=variant.label, node=node.id, parent=None if parent is None else parent.id, start=start
        )
        self._track_mode(fn)
        return result.outputs

    def _execute(self, node: Node, args: tuple, start: float) -> Any:
        prof = self._profiler
        if prof is None:
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

    def _managed_inputs(self, args: tuple) -> dict[int, tuple[int, int, int]]:
        """Inputs that are live outputs of the current path: they stay in place, not copied."""
        if self.current is None:
            return {}
        owners = {}
        for n in self.current.path:
            for i, leaf in enumerate(n.leaves):
                if leaf.ref is not None and n.output_alive(i):
                    owners[leaf.address] = (n.id, i, leaf.nbytes)
        found = {}
        for idx, a in enumerate(args):
            address = self.backend.address(a)
            for base, (node_id, out, nbytes) in owners.items():
                if base <= address < base + max(nbytes, 1):
                    found[idx] = (address, node_id, out)
        return found

    def _path_liveness(self) -> list[tuple[Node, int, bool]]:
        if self.current is None:
            return []
        return [
            (n, i, n.output_alive(i))
            for n in self.current.path
            for i, leaf in enumerate(n.leaves)
            if leaf.ref is not None and leaf.alias_of is None
        ]

    def _track_mode(self, fn: TreeFunction) -> None:
        if fn.mode == "forward":
            self.pending_backward += 1
        elif fn.mode == "backward" and self.pending_backward:
            self.pending_backward -= 1
