"""Call sequences around the inference loop's shortcut (cgviz/engine/steady.py), run on a tree
with the shortcut and on one without it: `run_both` returns what each did, for the tests on sim
(tests/test_steady_root.py) and on CUDA (tests/gpu/test_steady_root_gpu.py) to compare.

Each script makes its calls through `Calls`, which keeps every output's values (read at once,
on the host) and lets the script hold outputs, views of them or their storage across calls.
"""

from __future__ import annotations

import random
import re
import threading
from contextlib import contextmanager
from typing import Callable

import pytest
import torch

import cgviz
from cgviz.engine import tree as tree_module
from helpers import data


def affine(x):
    return (x * 2 + 1).relu()


def scaled(x):
    return x * 3 - 1


def pair(x):
    return x + 1, x.sum(0)


def weighted(x, w):
    return x * w


class Failure(Exception):
    """A failure of the user's function or of the replay, passed through to the user unchanged."""


def boom(x):
    raise Failure("the user's function failed")


class Calls:
    """A script's view of one tree: wrapped functions, inputs on the tree's device, and every
    output's values in the order they came."""

    def __init__(self, tree: cgviz.Tree, device: str) -> None:
        self.tree = tree
        self.device = device
        self.f = tree.wrap(affine, name="f")
        self.g = tree.wrap(scaled, name="g")
        self.p = tree.wrap(pair, name="p")
        self.b = tree.wrap(boom, name="boom")
        self.values: list = []
        self.seed = 0

    def x(self, *shape: int, grad: bool = False) -> torch.Tensor:
        self.seed += 1
        t = data(*(shape or (8,)), seed=self.seed, device=self.device)
        return t.requires_grad_() if grad else t

    def call(self, fn, *args, **kwargs):
        out = fn(*args, **kwargs)
        leaves = out if isinstance(out, tuple) else (out,)
        self.values.append([t.detach().cpu().clone() for t in leaves])
        return out

    def loop(self, fn, n: int, *shape: int) -> None:
        for _ in range(n):
            self.call(fn, self.x(*shape))  # the output is dropped at once


def plain_loop(c: Calls) -> None:
    c.loop(c.f, 12)


def held_output(c: Calls) -> None:
    """The user keeps an output across calls: the root's path is live, torch records a child."""
    c.loop(c.f, 6)
    kept = c.call(c.f, c.x())
    c.loop(c.f, 4)
    del kept
    c.loop(c.f, 4)


def held_view_and_storage(c: Calls) -> None:
    """What keeps an output live beyond the tensor handed out: a view, its storage."""
    c.loop(c.f, 6)
    view = c.call(c.f, c.x())[2:5]
    c.loop(c.f, 3)
    del view
    c.loop(c.f, 3)
    storage = c.call(c.f, c.x()).untyped_storage()
    c.loop(c.f, 3)
    del storage
    c.loop(c.f, 3)


def interleaved(c: Calls) -> None:
    """Another function between the loop's calls, and the loop again."""
    c.loop(c.f, 6)
    for i in range(8):
        c.call(c.g if i % 3 == 2 else c.f, c.x())
    c.loop(c.f, 4)


def other_signature(c: Calls) -> None:
    c.loop(c.f, 6)
    c.call(c.f, c.x(4, 2))
    c.loop(c.f, 5)
    c.loop(c.f, 4, 4, 2)
    c.loop(c.f, 3)


def generations(c: Calls) -> None:
    """mark_step() between the loop's calls, with and without an output held across it."""
    c.loop(c.f, 6)
    for i in range(9):
        if i % 4 == 3:
            c.tree.mark_step()
        c.call(c.f, c.x())
    kept = c.call(c.f, c.x())
    c.tree.mark_step()
    c.loop(c.f, 4)
    if c.tree.rules.generation_cloning is None:
        with pytest.raises(RuntimeError):
            kept + 1  # invalidated by mark_step(), as torch's outputs are
    else:
        c.values.append([kept.detach().cpu().clone()])  # copied out of the pool: its values kept
    c.loop(c.f, 2)


def reset_between(c: Calls) -> None:
    c.loop(c.f, 6)
    c.tree.reset()
    c.loop(c.f, 6)


def keyword_call(c: Calls) -> None:
    c.loop(c.f, 6)
    c.call(c.f, x=c.x())  # keyword arguments run eagerly
    c.loop(c.f, 4)


def grad_inputs(c: Calls) -> None:
    """Inputs that require grad: eager while autograd is on, graphed under no_grad."""
    with torch.no_grad():
        for _ in range(6):
            c.call(c.f, c.x(grad=True))
    for _ in range(2):
        c.call(c.f, c.x(grad=True))
    with torch.no_grad():
        for _ in range(3):
            c.call(c.f, c.x(grad=True))
    c.loop(c.f, 4)


def several_outputs(c: Calls) -> None:
    c.loop(c.p, 8)
    kept = c.call(c.p, c.x())[1]
    c.loop(c.p, 3)
    del kept
    c.loop(c.p, 3)


def static_input(c: Calls) -> None:
    """A root with a static input checks its address at every replay."""
    w = c.tree.wrap(weighted, static=(1,), name="w")
    weight = c.x()
    for _ in range(6):
        c.call(w, c.x(), weight)
    moved = c.x()
    for _ in range(4):
        c.call(w, c.x(), moved)


def nested(c: Calls) -> None:
    """A tree function calling another of the same tree: part of the outer call."""
    outer = c.tree.wrap(lambda x: c.f(x) * 2, name="outer")
    for _ in range(7):
        c.call(outer, c.x())
    c.loop(c.f, 5)


def replay_raises(c: Calls) -> None:
    """The replay fails in the middle of the loop: the user's exception, the path ended.
    On sim the shortcut replays through the backend's replay(); CUDA's own replay launches the
    graph directly, so there a call of another function comes first and the loop's next call
    takes the decision path."""
    c.loop(c.f, 6)
    if c.device != "sim":
        c.call(c.g, c.x())
    backend = c.tree.backend

    def broken(*args):
        raise Failure("the replay failed")

    backend.replay = broken
    backend.steady_replay = lambda *args: None  # a shortcut made now replays through replay()
    try:
        with pytest.raises(Failure):
            c.call(c.f, c.x())
    finally:
        del backend.replay, backend.steady_replay
    c.loop(c.f, 4)


def from_threads(c: Calls) -> None:
    """Calls from two threads, serialised by the tree: each thread's loop in turn."""
    c.loop(c.f, 6)
    for _ in range(2):
        worker = threading.Thread(target=c.loop, args=(c.f, 4))
        worker.start()
        worker.join()
        c.loop(c.f, 3)


def random_script(seed: int) -> Callable[[Calls], None]:
    """Runs of the loop broken at random: outputs held and dropped, views held, another function,
    another signature, mark_step(), a failing call (seeded: the same seed, the same script)."""
    rng = random.Random(seed)
    actions = [rng.choice(("loop", "loop", "loop", "hold", "view", "drop", "other", "shape", "step", "boom"))
               for _ in range(rng.randint(6, 14))]

    def script(c: Calls) -> None:
        held: list = []
        for action in actions:
            if action == "loop":
                c.loop(c.f, rng.randint(2, 8))
            elif action == "hold":
                held.append(c.call(c.f, c.x()))
            elif action == "view":
                held.append(c.call(c.f, c.x())[1:3])
            elif action == "drop" and held:
                del held[rng.randrange(len(held))]
            elif action == "other":
                c.call(c.g, c.x())
            elif action == "shape":
                c.call(c.f, c.x(2, 4))
            elif action == "step":
                c.tree.mark_step()
                held.clear()  # invalidated: using them would raise
            elif action == "boom":
                with pytest.raises(Failure):
                    c.call(c.b, c.x())
        c.loop(c.f, 3)

    return script


SCRIPTS: dict[str, Callable[[Calls], None]] = {
    "plain_loop": plain_loop, "held_output": held_output, "held_view_and_storage": held_view_and_storage,
    "interleaved": interleaved, "other_signature": other_signature, "generations": generations,
    "reset_between": reset_between, "keyword_call": keyword_call, "grad_inputs": grad_inputs,
    "several_outputs": several_outputs, "static_input": static_input, "nested": nested,
    "replay_raises": replay_raises, "from_threads": from_threads,
}


@contextmanager
def shortcut_off():
    """A tree that never keeps the shortcut: each call takes the decision path."""
    made = tree_module.steady_root
    tree_module.steady_root = lambda *args: None
    try:
        yield
    finally:
        tree_module.steady_root = made


class Counted(cgviz.Tree):
    """A tree counting the calls that took the decision path (Tree._run)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.decided = 0

    def _run(self, variant, args, start):
        self.decided += 1
        return super()._run(variant, args, start)


# the trees compared: each trace level, and a profile at "events" (the shortcut then replays
# through the tree's own steps, as at "full")
TREES = {"None": {"trace": None}, "events": {"trace": "events"}, "full": {"trace": "full"},
         "events_profile": {"trace": "events", "profile": True}}
# other releases' rules: torch 2.14's generation cloning (mark_step() copies live outputs out of
# the pool) and 2.15's limits on managed inputs and shapes
RULE_TREES = {"cloning_2.14": {"trace": "full", "rules": "2.14", "generation_cloning": "user_visible"},
              "rules_2.15": {"trace": "events", "rules": "2.15"}}


def run(script: str | int, device: str, tree_kind: str) -> dict:
    """What a script did on a fresh tree of `tree_kind` (TREES, RULE_TREES): its steps (with their snapshots
    at "full"), outputs, nodes, and decision-path calls (`script`: a name in SCRIPTS, or the
    seed of a random_script)."""
    tree = Counted(device, **(TREES | RULE_TREES)[tree_kind])
    c = Calls(tree, device)
    (random_script(script) if isinstance(script, int) else SCRIPTS[script])(c)
    steps = [] if tree.trace_level is None else [
        (s.kind, said(s.reason, device), s.function, s.node, s.parent, s.generation, s.repeat, s.span, s.invalidated,
         shown(s.snapshot, device))
        for s in tree.trace.steps]
    nodes = [(n.id, n.kind, None if n.parent is None else n.parent.id, n.replays, n.generation) for n in tree.nodes]
    where = (None if tree.current is None else tree.current.id, tree.state, tree.generation)
    return {"steps": steps, "values": c.values, "nodes": nodes, "where": where, "decided": tree.decided}


def said(reason: str, device: str) -> str:
    """A step's reason, but the addresses of CUDA memory: a static input the script allocates
    itself lies wherever the caching allocator puts it, run by run."""
    return reason if device == "sim" else re.sub(r"0x[0-9a-f]+", "0x…", reason)


def shown(snapshot, device: str):
    """What a snapshot shows, but the addresses of CUDA memory (each tree has its own pool)."""
    if snapshot is None or device == "sim":
        return snapshot
    nodes = [(n.id, n.function, n.kind, n.parent, n.children, n.generation, n.replays, n.signature,
              [(o.index, o.shape, o.dtype, o.nbytes, o.state, o.alias_of) for o in n.outputs]) for n in snapshot.nodes]
    blocks = [[(b.size, b.allocated, b.requested, b.owner) for b in seg.blocks] for seg in snapshot.segments]
    return nodes, snapshot.current_node, snapshot.path, snapshot.state, snapshot.generation, blocks


def run_both(script: str | int, device: str, tree_kind: str) -> tuple[dict, dict]:
    """The script with the shortcut, then without it."""
    with_it = run(script, device, tree_kind)
    with shortcut_off():
        without = run(script, device, tree_kind)
    return with_it, without


def same_values(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(torch.equal(s, t) for s, t in zip(x, y)) for x, y in zip(a, b))
