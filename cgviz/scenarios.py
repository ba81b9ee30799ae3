"""Canonical workloads that show each behaviour of CUDA graph trees.

Every scenario runs on any backend, checks each result against the same computation run
eagerly (bit for bit), and makes the same decisions on sim and on cuda. The demo, the
tests, the notebooks and the benchmarks use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from cgviz.engine.tree import Tree


@dataclass
class ScenarioRun:
    """A finished scenario: its tree, and the results that differed from eager (should be none)."""

    name: str
    tree: Tree
    mismatches: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # errors the scenario provoked on purpose

    @property
    def trace(self):
        return self.tree.trace


@dataclass
class Scenario:
    name: str
    title: str
    description: str
    body: Callable[[Tree, "Checker"], None]
    tree_options: dict = field(default_factory=dict)


class Checker:
    """Compares tree results with eager results and remembers what differed."""

    def __init__(self, run: ScenarioRun) -> None:
        self.run = run

    def same(self, label: str, got: Any, expected: Any) -> None:
        got_leaves = got if isinstance(got, (tuple, list)) else (got,)
        exp_leaves = expected if isinstance(expected, (tuple, list)) else (expected,)
        for k, (g, e) in enumerate(zip(got_leaves, exp_leaves)):
            if not torch.equal(g, e):
                self.run.mismatches.append(f"{label}: output {k} differs from eager")


def _data(tree: Tree, *shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    device = tree.device if tree.backend.name == "cuda" else "cpu"
    return torch.randn(*shape, generator=gen).to(device)


# -- the workloads ---------------------------------------------------------------------------
def _chain(tree: Tree, check: Checker) -> None:
    def f(x):
        return (x * 2 + 1).relu()

    def g(y):
        return y.sin() * y

    def h(z):
        return z.cumsum(0) - 1

    tf, tg, th = tree.wrap(f, name="f"), tree.wrap(g, name="g"), tree.wrap(h, name="h")
    for i in range(4):
        x = _data(tree, 64, seed=i)
        out = th(tg(tf(x)))
        check.same(f"chain call {i}", out, h(g(f(x))))
        del out


def _branching(tree: Tree, check: Checker) -> None:
    def a(x):
        return x.exp() + 1

    def b(y):
        return y.log() * 3

    def b_prime(y):
        return y.sqrt() - 2

    ta, tb, tbp = tree.wrap(a, name="A"), tree.wrap(b, name="B"), tree.wrap(b_prime, name="B'")
    for i in range(3):  # A → B
        x = _data(tree, 256, seed=i)
        ya = ta(x)
        yb = tb(ya)
        check.same(f"A→B call {i}", (ya, yb), (a(x), b(a(x))))
        del ya, yb
    for i in range(3):  # A → B' with B dead
        x = _data(tree, 256, seed=10 + i)
        ya = ta(x)
        ybp = tbp(ya)
        check.same(f"A→B' call {i}", (ya, ybp), (a(x), b_prime(a(x))))
        del ya, ybp


def _generations(tree: Tree, check: Checker) -> None:
    def f(x):
        return x * x + 1

    def g(y):
        return y.mean(0, keepdim=True)

    tf, tg = tree.wrap(f, name="f"), tree.wrap(g, name="g")
    kept = None
    for i in range(4):
        tree.mark_step()
        x = _data(tree, 8, 8, seed=i)
        y = tf(x)
        check.same(f"step {i} f", y, f(x))
        z = tg(y)
        check.same(f"step {i} g", z, g(f(x)))
        if i == 2:
            kept = z  # kept across mark_step(): invalidated by the next step
    tree.mark_step()
    try:
        tg(kept)  # touching an invalidated output raises, and the trace records it
    except RuntimeError as exc:
        check.run.errors.append(str(exc))


def _fwd_bwd(tree: Tree, check: Checker) -> None:
    w = _data(tree, 16, 16, seed=99)

    def forward(x, w):
        h = x @ w
        return h.relu(), h

    def backward(x, h, grad_y):
        return x.t() @ (grad_y * (h > 0))

    tfwd = tree.wrap(forward, static=(1,), name="forward", mode="forward")
    tbwd = tree.wrap(backward, name="backward", mode="backward")
    for i in range(4):
        tree.mark_step()
        x = _data(tree, 8, 16, seed=i)
        y, h = tfwd(x, w)
        gw = tbwd(x, h, torch.ones_like(y))
        check.same(f"step {i}", (y, gw), (*forward(x, w)[:1], backward(x, forward(x, w)[1], torch.ones_like(y))))
        del y, h, gw
    # two forwards before their backwards: the second is recorded under the first
    tree.mark_step()
    x1, x2 = _data(tree, 8, 16, seed=20), _data(tree, 8, 16, seed=21)
    y1, h1 = tfwd(x1, w)
    y2, h2 = tfwd(x2, w)
    g1 = tbwd(x1, h1, torch.ones_like(y1))
    g2 = tbwd(x2, h2, torch.ones_like(y2))
    check.same("pending forward 1", g1, backward(x1, forward(x1, w)[1], torch.ones_like(y1)))
    check.same("pending forward 2", g2, backward(x2, forward(x2, w)[1], torch.ones_like(y2)))


def _static_move(tree: Tree, check: Checker) -> None:
    def f(x, w):
        return torch.tanh(x @ w)

    tf = tree.wrap(f, static=(1,), name="f")
    weights = [_data(tree, 32, 32, seed=1)]
    x = _data(tree, 4, 32, seed=2)
    for i in range(7):
        if i >= 3:
            weights.append(weights[-1].clone())  # same values, new address: the static input moved
        w = weights[-1]
        y = tf(x, w)
        check.same(f"call {i}", y, f(x, w))
        del y


def _dynamic_shapes(tree: Tree, check: Checker) -> None:
    def f(x):
        return x.softmax(-1) * x.shape[-1]

    tf = tree.wrap(f, name="f")
    for rnd in range(2):
        for n in (4, 8, 16):
            x = _data(tree, 2, n, seed=n + rnd)
            y = tf(x)
            check.same(f"round {rnd} shape {n}", y, f(x))
            del y
    x = _data(tree, 2, 32, seed=5)
    y = tf(x)  # one signature past shape_limit: eager
    check.same("shape 32", y, f(x))


def _training(tree: Tree, check: Checker) -> None:
    torch.manual_seed(0)
    device = tree.device if tree.backend.name == "cuda" else "cpu"
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
    names = [n for n, _ in model.named_parameters()]

    def train_step(x, target, *params):
        with torch.enable_grad():
            out = torch.func.functional_call(model, dict(zip(names, params)), (x,))
            loss = torch.nn.functional.mse_loss(out, target)
            grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(0.1 * g)
        return loss.detach()

    params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    reference = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    step = tree.wrap(train_step, static=tuple(range(2, 2 + len(params))), name="train_step")
    with torch.no_grad():
        for i in range(6):
            tree.mark_step()
            x, t = _data(tree, 32, 8, seed=i), _data(tree, 32, 1, seed=100 + i)
            loss = step(x, t, *params)
            check.same(f"iteration {i} loss", loss, train_step(x, t, *reference))
    check.same("final parameters", tuple(params), tuple(reference))


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("chain", "Linear chain f → g → h", "Three functions, each fed by the previous one's output: "
                 "warmup, then a root and two children, then replays.", _chain),
        Scenario("branching", "Branching A → B, then A → B'", "After A → B is recorded, A's output feeds a new "
                 "function B': a checkpoint restore, a warmup under A, then a sibling of B that reuses B's memory.",
                 _branching),
        Scenario("generations", "Generations and an invalidated output", "mark_step() before each step; an output "
                 "kept across a step is invalidated and touching it raises.", _generations),
        Scenario("fwd_bwd", "Forward + backward, with a pending backward", "A forward and its backward as two "
                 "functions; two forwards before their backwards make the second forward a child of the first.",
                 _fwd_bwd),
        Scenario("static_move", "A static input that moves", "A parameter replaced by a copy at a new address: "
                 "each move records a new graph (as torch does, without limit for static inputs).", _static_move),
        Scenario("dynamic_shapes", "Dynamic shapes", "One function called with three input shapes: one root per "
                 "shape; a fourth shape is past the shape limit and runs eagerly.", _dynamic_shapes,
                 {"shape_limit": 3}),
        Scenario("training", "A small nn.Module training loop", "Forward, autograd and an SGD update of an MLP in "
                 "one graphed step with the parameters static; mark_step() each iteration.", _training),
    )
}


def run_scenario(name: str, device: str = "auto", trace: Optional[str] = "full", tree: Optional[Tree] = None) -> ScenarioRun:
    """Run scenario `name` on a new tree (or on `tree`) and return it with any mismatches."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    scenario = SCENARIOS[name]
    if tree is None:
        tree = Tree(device, trace=trace, name=name, **scenario.tree_options)
    tree.trace.meta["scenario"] = name
    run = ScenarioRun(name, tree)
    scenario.body(tree, Checker(run))
    return run
