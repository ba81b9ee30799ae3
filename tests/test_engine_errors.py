"""What the tree does with calls it cannot graph, bad arguments, and exceptions raised by
user functions: the fallback to eager with its reason, clear errors, an "error" step, and a
tree that keeps working afterwards, with results equal to eager.
"""

from __future__ import annotations

import gc
import re

import pytest
import torch

import cgviz
from helpers import data, kinds, last_step


def assert_graphs_normally(tree, tf, fn, *, shape=(8,)):
    """Three more calls of `tf`: results equal eager, and the last one replays a graph."""
    for i in range(3):
        x = data(*shape, seed=50 + i)
        y = tf(x)
        assert torch.equal(y, fn(x))
        del y
    assert last_step(tree).kind == "execute" and last_step(tree).function == tf.name


# -- inputs the tree cannot graph: eager, with the reason -------------------------------------
def scale(x, *rest, **options):
    return x * 2


CASES = {
    "int argument": (lambda: ((data(4), 3), {}), r"input 1 is an? int, not a tensor"),
    "None argument": (lambda: ((data(4), None), {}), r"input 1 is an? NoneType, not a tensor"),
    "keyword argument": (lambda: ((data(4),), {"alpha": data(4)}), r"keyword arguments \(alpha\)"),
    "meta tensor": (lambda: ((torch.empty(4, device="meta"),), {}), r"input 0 is on meta"),
    "sparse tensor": (lambda: ((torch.eye(4).to_sparse(),), {}), r"input 0 has layout torch.sparse_coo"),
    "requires grad": (lambda: ((data(4).requires_grad_(),), {}), r"input 0 requires grad and autograd is on"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_ungraphable_call_runs_eagerly_with_its_reason(tree, case):
    make, fact = CASES[case]
    tf = tree.wrap(scale, name="scale")
    for _ in range(3):  # never warmed up, never recorded: every call is eager
        args, kwargs = make()
        out = tf(*args, **kwargs)
        expected = scale(*args, **kwargs)
        if out.device.type == "meta":
            assert out.shape == expected.shape
        elif out.is_sparse:
            assert torch.equal(out.to_dense(), expected.to_dense())
        else:
            assert torch.equal(out, expected)
        step = last_step(tree)
        assert step.kind == "eager" and step.function == "scale" and step.node is None
        assert step.reason.startswith("scale runs eagerly: ") and re.search(fact, step.reason), step.reason
    assert tree.nodes == [] and kinds(tree) == ["eager"] * 3


def test_input_requiring_grad_is_graphed_when_autograd_is_off(tree):
    tf = tree.wrap(scale, name="scale")
    x = data(4).requires_grad_()
    with torch.no_grad():
        for _ in range(3):
            y = tf(x)
            assert torch.equal(y, x * 2)
            del y
    assert kinds(tree) == ["warmup", "path_end", "record", "path_end", "execute"]


def test_eager_output_keeps_autograd_history(tree):
    tf = tree.wrap(lambda x: (x * 3).sum(), name="f")
    x = data(4).requires_grad_()
    tf(x).backward()
    assert torch.equal(x.grad, torch.full((4,), 3.0))


def test_function_that_mutates_a_non_static_input_runs_eagerly_after_warmup(tree):
    def bump(x):
        x.add_(1)
        return x * 2

    tb = tree.wrap(bump, name="bump")
    x, reference = torch.zeros(4), torch.zeros(4)
    for _ in range(3):
        y = tb(x)
        expected = bump(reference)
        assert torch.equal(y, expected) and torch.equal(x, reference)  # the caller's tensor is mutated
        del y
    warm = tree.trace.steps[0]
    assert warm.kind == "warmup" and "mutates input 0 in place, so it is graphed only where" in warm.reason
    assert [k for k in kinds(tree) if k != "path_end"] == ["warmup", "eager", "eager"]
    assert "bump runs eagerly as a root: it mutates input 0 in place" in last_step(tree).reason
    assert "static" in last_step(tree).reason  # tells the user how to fix it
    assert "eager: bump runs eagerly" in tree.explain()


def test_mutation_is_checked_at_every_call_not_only_at_warmup(tree):
    """Warmed up on a tree output (mutation allowed there), later given a plain tensor: the
    caller's tensor must be mutated and the result right, so that call runs eagerly."""

    def bump(x):
        x.add_(1)
        return x * 2

    make = tree.wrap(lambda x: x + 0, name="make")
    tb = tree.wrap(bump, name="bump")
    for _ in range(3):  # graphed where its input is an output of the path
        m = make(torch.zeros(4))
        y = tb(m)
        assert torch.equal(m, torch.ones(4)) and torch.equal(y, torch.full((4,), 2.0))
        del m, y
    assert tree.trace.steps[-1].kind == "execute" and tree.trace.steps[-1].function == "bump"
    plain = torch.zeros(4)
    y = tb(plain)
    assert torch.equal(plain, torch.ones(4)), "the caller's tensor was not mutated"
    assert torch.equal(y, torch.full((4,), 2.0))
    step = last_step(tree)
    assert step.kind == "eager" and "mutates input 0 in place" in step.reason
    del y
    for _ in range(2):  # and still graphed on tree outputs
        m = make(torch.zeros(4))
        y = tb(m)
        assert torch.equal(m, torch.ones(4)) and torch.equal(y, torch.full((4,), 2.0))
        assert last_step(tree).kind == "execute"
        del m, y


def test_mutation_of_inference_tensors_is_seen(tree):
    def bump(x):
        x.add_(1)
        return x * 2

    tb = tree.wrap(bump, name="bump")
    with torch.inference_mode():
        x, reference = torch.zeros(4), torch.zeros(4)
        for _ in range(3):
            y = tb(x)
            assert torch.equal(y, bump(reference)) and torch.equal(x, reference)
            del y
    assert "mutates input 0" in tree.trace.steps[0].reason


def test_function_that_mutates_a_static_input_is_graphed(tree):
    def step(x, w):
        w.add_(x)
        return w * 1

    ts = tree.wrap(step, static=(1,), name="step")
    x, w, reference = torch.ones(4), torch.zeros(4), torch.zeros(4)
    for _ in range(4):
        y = ts(x, w)
        assert torch.equal(y, step(x, reference)) and torch.equal(w, reference)
        del y
    assert kinds(tree) == ["warmup", "path_end", "record", "path_end", "execute", "path_end", "execute"]


def test_function_that_copies_to_the_host_runs_eagerly_after_warmup(tree):
    def normalize(x):
        return x / x.abs().max().item()

    tn = tree.wrap(normalize, name="normalize")
    for i in range(3):
        x = data(6, seed=i)
        y = tn(x)
        assert torch.equal(y, normalize(x))
        del y
    warm = tree.trace.steps[0]
    assert warm.kind == "warmup" and "later calls run eagerly" in warm.reason
    assert kinds(tree) == ["warmup", "eager", "eager"]
    reason = last_step(tree).reason
    assert "copies device memory to the host" in reason and "_local_scalar_dense" in reason


def test_static_index_out_of_range_raises_index_error_and_the_tree_stays_usable(tree):
    bad = tree.wrap(lambda x: x + 1, static=(1,), name="bad")
    with pytest.raises(IndexError, match=r"bad: static input index 1 is out of range for 1 inputs"):
        bad(data(4))
    err = last_step(tree)
    assert err.kind == "error" and err.function == "bad" and "IndexError" in err.reason
    assert tree.nodes == []
    good = tree.wrap(lambda x: x - 1, name="good")
    assert_graphs_normally(tree, good, lambda x: x - 1)


@pytest.mark.parametrize(
    "static, error",
    [("a", (TypeError, ValueError)), (-1, ValueError), ((0, -2), ValueError), (1.5, TypeError),
     ((True,), (TypeError, ValueError)), ((0, "b"), (TypeError, ValueError))],
)
def test_wrap_rejects_a_bad_static(tree, static, error):
    with pytest.raises(error, match="static"):
        tree.wrap(lambda x: x, static=static)
    assert tree.functions == {}


@pytest.mark.parametrize("static, expected", [(None, ()), (0, (0,)), ([2, 0], (2, 0)), ((), ())])
def test_wrap_accepts_static_as_an_int_or_a_sequence(tree, static, expected):
    assert tree.wrap(lambda x: x, static=static).static == expected


def test_wrap_rejects_a_non_callable_and_a_bad_mode(tree):
    with pytest.raises(TypeError, match="callable"):
        tree.wrap(3)
    with pytest.raises(ValueError, match="mode must be one of"):
        tree.wrap(lambda x: x, mode="train")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_tree_without_cuda_raises_and_names_sim(device):
    with pytest.raises(RuntimeError, match="sim") as info:
        cgviz.Tree(device=device)
    assert "CUDA is not available" in str(info.value)


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"device": "bogus"}, ValueError, "unknown device 'bogus'"),
        ({"device": 0}, TypeError, "device must be a string"),
        ({"device": "sim", "trace": "bad"}, ValueError, "trace must be one of"),
        ({"device": "sim", "rerecord_limit": -1}, ValueError, "rerecord_limit"),
        ({"device": "sim", "shape_limit": "8"}, TypeError, "shape_limit must be an int, not str"),
        ({"device": "sim", "rerecord_limit": True}, TypeError, "rerecord_limit must be an int, not bool"),
        ({"device": "sim", "shape_limit": 2.0}, TypeError, "shape_limit must be an int, not float"),
        ({"device": "sim", "name": 5}, TypeError, "name must be a string or None, not int"),
    ],
)
def test_tree_rejects_bad_arguments(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        cgviz.Tree(**kwargs)


# -- exceptions raised by the user's function -------------------------------------------------
class Flaky:
    """x * 2 + 1, raising ValueError on the calls listed in `fail_on` (1-based)."""

    def __init__(self, *fail_on: int) -> None:
        self.fail_on = set(fail_on)
        self.calls = 0
        self.raised: list[BaseException] = []

    def __call__(self, x):
        self.calls += 1
        y = x * 2  # allocates in the pool before raising
        if self.calls in self.fail_on:
            exc = ValueError(f"boom on call {self.calls}")
            self.raised.append(exc)
            raise exc
        return y + 1


def forget_exception(fn: Flaky) -> None:
    """Drop the caught exception (the caller deletes its ExceptionInfo first): its traceback
    keeps the failed run's tensors, inputs included, alive."""
    fn.raised.clear()
    gc.collect()


@pytest.mark.parametrize(
    "failing_call, phase, expected_kinds",
    [
        (1, "warmup", ["error", "warmup", "path_end", "record", "path_end", "execute", "path_end", "execute"]),
        (2, "record", ["warmup", "path_end", "error", "record", "path_end", "execute", "path_end", "execute"]),
        (3, "execute", ["warmup", "path_end", "record", "path_end", "error", "execute", "path_end", "execute"]),
    ],
)
def test_exception_in_user_function_propagates_unchanged_and_the_tree_recovers(
    tree, failing_call, phase, expected_kinds
):
    fn = Flaky(failing_call)
    tf = tree.wrap(fn, name="flaky")
    x = data(8)
    nodes_before = None
    for call in range(1, 5):
        if call == failing_call:
            nodes_before = len(tree.nodes)
            with pytest.raises(ValueError, match=f"^boom on call {call}$") as info:
                tf(x)
            assert info.value is fn.raised[0]  # the very exception the function raised
            err = last_step(tree)
            assert err.kind == "error" and err.function == "flaky" and err.node is None
            assert f"ValueError: boom on call {call}" in err.reason and "no node was added" in err.reason
            assert len(tree.nodes) == nodes_before
            del info
            forget_exception(fn)
        else:
            y = tf(x)
            assert torch.equal(y, x * 2 + 1)
            del y
    assert kinds(tree)[:6] == expected_kinds[:6]
    assert_graphs_normally(tree, tf, lambda t: t * 2 + 1)
    snap = tree.snapshot()
    assert [n.kind for n in snap.nodes] == ["warmup", "graph"]
    # nothing allocated by the failed run stays allocated in the pool
    stale = [b for s in snap.segments for b in s.blocks if b.allocated and b.owner == "unowned (intermediate or stale)"]
    assert stale == []


def test_exception_in_a_child_while_its_parent_output_is_live(tree):
    g_fn = Flaky(3)
    f = tree.wrap(lambda x: x + 1, name="f")
    g = tree.wrap(g_fn, name="g")
    x = data(8)
    for call in range(1, 6):
        y = f(x)
        if call == 3:  # g's first replay under f's graph raises
            with pytest.raises(ValueError, match="boom on call 3") as info:
                g(y)
            assert last_step(tree).kind == "error"
            assert torch.equal(y, x + 1)  # the parent's output is untouched
            del info
            forget_exception(g_fn)
        else:
            z = g(y)
            assert torch.equal(z, (x + 1) * 2 + 1)
            del z
        del y
    snap = tree.snapshot()
    assert [(n.function, n.kind, n.parent) for n in snap.nodes if n.kind == "graph"] == [("f", "graph", None), ("g", "graph", 2)]
    assert [(s.kind, s.function) for s in tree.trace.steps[-2:]] == [("execute", "f"), ("execute", "g")]


def test_exception_while_recording_a_child_after_a_checkpoint_restore(tree):
    flaky = Flaky(2)  # the warmup works, the recording raises
    a = tree.wrap(lambda x: x * 3, name="A")
    b = tree.wrap(flaky, name="B")
    x = data(8)
    for _ in range(3):
        y = a(x)
        del y
    for call in range(1, 5):
        y = a(x)
        if call == 2:
            with pytest.raises(ValueError, match="boom on call 2") as info:
                b(y)
            del info
            forget_exception(flaky)
        else:
            z = b(y)
            assert torch.equal(z, x * 3 * 2 + 1)
            del z
        del y
    graphs = [(n.function, n.parent) for n in tree.snapshot().nodes if n.kind == "graph"]
    assert graphs == [("A", None), ("B", 1)]
    assert kinds(tree).count("error") == 1
    assert [(s.kind, s.function) for s in tree.trace.steps[-2:]] == [("execute", "A"), ("execute", "B")]


def test_keyboard_interrupt_is_recorded_and_propagates(tree):
    def interrupted(x):
        raise KeyboardInterrupt

    ti = tree.wrap(interrupted, name="interrupted")
    with pytest.raises(KeyboardInterrupt):
        ti(data(4))
    assert last_step(tree).kind == "error" and "KeyboardInterrupt" in last_step(tree).reason


def test_an_error_message_ending_a_sentence_is_followed_by_a_sentence(tree):
    def sentence(x):
        raise ValueError("the batch is empty.")

    with pytest.raises(ValueError, match=r"^the batch is empty\.$"):
        tree.wrap(sentence, name="sentence")(data(8))
    assert last_step(tree).reason == "sentence raised ValueError: the batch is empty. No node was added."
