"""The engine on real CUDA graphs: replay, invalidation, pool memory, fallbacks."""

import pytest
import torch

import cgviz
from helpers import kinds

DEV = "cuda"


def test_warmup_record_execute_equal_eager_and_replay_is_a_real_graph():
    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x: (x * 2 + 1).relu(), name="f")
    for i in range(4):
        x = torch.randn(1024, device=DEV)
        y = f(x)
        assert torch.equal(y, (x * 2 + 1).relu())
        del y
    assert [k for k in kinds(tree) if k != "path_end"] == ["warmup", "record", "execute", "execute"]
    node = tree.nodes[1]
    assert isinstance(node.graph.graph, torch.cuda.CUDAGraph)
    assert node.replays == 2


def test_replay_outputs_live_in_the_pool_at_the_recorded_address():
    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x: x + 1, name="f")
    for _ in range(2):
        del_y = f(torch.ones(8, device=DEV))
        del del_y
    y = f(torch.ones(8, device=DEV))
    assert len(tree.nodes) == 2, [(s.kind, s.reason) for s in tree.trace.expanded()]
    assert y.data_ptr() == tree.nodes[1].leaves[0].address
    snap = tree.snapshot()
    owned = [b for seg in snap.segments for b in seg.blocks if b.node == 1 and b.output == 0]
    assert len(owned) == 1, [(hex(b.address), b.size, b.allocated, b.owner) for s in snap.segments for b in s.blocks]
    assert owned[0].address <= y.data_ptr() < owned[0].address + owned[0].size


def test_mark_step_invalidates_and_access_raises_naming_node_and_generation():
    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x: x * 3, name="f")
    for _ in range(3):
        tree.mark_step()
        y = f(torch.ones(4, device=DEV))
    tree.mark_step()
    with pytest.raises(RuntimeError, match=r"overwritten by a subsequent run.*f \(node 1, generation \d+\)"):
        print(y)
    assert tree.trace.steps[-1].kind == "generation"
    assert tree.trace.steps[-1].invalidated == [[1, 0]]


def test_static_input_moved_records_again_at_each_new_address():
    tree = cgviz.Tree(DEV, rerecord_limit=1)
    f = tree.wrap(lambda x, w: x @ w, static=(1,), name="f")
    x = torch.randn(4, 4, device=DEV)
    w = torch.randn(4, 4, device=DEV)
    for _ in range(2):
        del_y = f(x, w)
        del del_y
    weights = [w.clone() for _ in range(3)]
    for wi in weights:
        y = f(x, wi)
        assert torch.equal(y, x @ wi)
        del y
        rec = tree.trace.steps[-1]
        assert rec.kind == "record" and "static input 1 moved" in rec.reason


def test_branching_memory_sibling_reuses_parent_free_memory():
    """A→B, then A→B' with B dead: B' costs no more than A→B plus one segment; blocks are reused."""
    tree = cgviz.Tree(DEV)
    n = 256 * 1024  # 1 MiB of float32 per tensor
    a = tree.wrap(lambda x: x.exp(), name="A")
    b = tree.wrap(lambda y: (y * 2).sin() + 1, name="B")
    bp = tree.wrap(lambda y: (y * 3).cos() - 1, name="Bp")
    for _ in range(3):
        ya = a(torch.randn(n, device=DEV))
        yb = b(ya)
        b_address = yb.data_ptr()
        del ya, yb
    reserved_ab = tree.snapshot().reserved_bytes
    largest_segment = max(s.size for s in tree.snapshot().segments)
    for _ in range(3):
        ya = a(torch.randn(n, device=DEV))
        ybp = bp(ya)
        bp_address = ybp.data_ptr()
        del ya, ybp
    assert "checkpoint_restore" in kinds(tree)
    reserved_all = tree.snapshot().reserved_bytes
    assert reserved_all <= reserved_ab + largest_segment
    record_bp = [s for s in tree.trace.steps if s.kind == "record" and s.function == "Bp"][0]
    assert record_bp.parent == tree.trace.steps[[s.kind for s in tree.trace.steps].index("record")].node
    assert bp_address == b_address  # B's freed output block holds B'


def test_freed_output_block_is_reused_by_next_recording():
    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x: x * 2, name="f")
    g = tree.wrap(lambda x: x + 5, name="g")
    for fn in (f, f, g, g):
        y = fn(torch.ones(1024, device=DEV))
        del y
    rec = [s for s in tree.trace.steps if s.kind == "record"]
    f_out = tree.nodes[rec[0].node].leaves[0].address
    g_out = tree.nodes[rec[1].node].leaves[0].address
    assert g_out == f_out  # g's recording reused the block f's dead output freed


# -- behaviours of torch's dynamo cudagraphs tests ------------------------------------------
def test_device_to_host_copy_runs_eagerly_with_reason():
    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x: x * x.sum().item(), name="d2h")
    for _ in range(3):
        x = torch.randn(8, device=DEV)
        assert torch.equal(f(x), x * x.sum().item())
    assert kinds(tree)[0] == "warmup" and "host" in tree.trace.steps[0].reason
    assert kinds(tree)[-1] == "eager" and "_local_scalar_dense" in tree.trace.steps[-1].reason


def test_cpu_scalar_input_runs_eagerly_with_reason():
    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x, s: x * s, name="scale")
    x, s = torch.randn(8, device=DEV), torch.tensor(3.0)
    for _ in range(3):
        assert torch.equal(f(x, s), x * s)
    assert set(kinds(tree)) == {"eager"}
    assert "CPU scalar" in tree.trace.steps[0].reason


def test_input_mutation_runs_eagerly_and_mutates_the_users_tensor():
    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x: x.add_(1), name="mutate")
    x = torch.zeros(4, device=DEV)
    for i in range(3):
        f(x)
    assert torch.equal(x, torch.full((4,), 3.0, device=DEV))
    assert kinds(tree)[-1] == "eager" and "mutates input 0" in tree.trace.steps[-1].reason


def test_constant_mutated_inside_matches_eager():
    const = torch.zeros(4, device=DEV)
    ref = torch.zeros(4, device=DEV)

    def fn(x, c):
        c.add_(1)
        return x + c

    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x: fn(x, const), name="const")
    for _ in range(4):
        x = torch.ones(4, device=DEV)
        y = f(x)
        assert torch.equal(y, fn(x, ref))
        del y
    assert torch.equal(const, ref)
    assert "execute" in kinds(tree)


def test_factory_function_inside_graph():
    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x: x + torch.arange(8, device=x.device, dtype=x.dtype), name="factory")
    for _ in range(3):
        x = torch.randn(8, device=DEV)
        y = f(x)
        assert torch.equal(y, x + torch.arange(8, device=DEV, dtype=x.dtype))
        del y
    assert "execute" in kinds(tree)


def test_resized_output():
    def fn(x):
        out = torch.empty(0, device=x.device)
        out.resize_(x.shape)
        torch.mul(x, 2, out=out)
        return out

    tree = cgviz.Tree(DEV)
    f = tree.wrap(fn, name="resize")
    for _ in range(3):
        x = torch.randn(16, device=DEV)
        y = f(x)
        assert torch.equal(y, x * 2)
        del y
    assert "execute" in kinds(tree)


def test_dead_fill():
    def fn(x):
        dead = torch.empty_like(x).fill_(7)  # computed, never returned
        dead.add_(1)
        return x * 2

    tree = cgviz.Tree(DEV)
    f = tree.wrap(fn, name="dead_fill")
    for _ in range(3):
        x = torch.randn(16, device=DEV)
        y = f(x)
        assert torch.equal(y, x * 2)
        del y
    assert "execute" in kinds(tree)


def test_user_exception_during_record_leaves_tree_usable():
    calls = {"n": 0}

    def fn(x):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ValueError("boom on record")
        return x - 1

    tree = cgviz.Tree(DEV)
    f = tree.wrap(fn, name="flaky")
    x = torch.ones(4, device=DEV)
    del_y = f(x)
    del del_y
    with pytest.raises(ValueError, match="boom on record"):
        f(x)
    n_nodes = len(tree.nodes)
    assert tree.trace.steps[-1].kind == "error"
    for _ in range(2):
        y = f(x)
        assert torch.equal(y, x - 1)
        del y
    assert len(tree.nodes) == n_nodes + 1
    assert kinds(tree)[-1] == "execute"


def test_other_device_input_is_eager_and_wrong_device_tree_is_clear():
    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x: x + 1, name="f")
    f(torch.ones(3))
    assert tree.trace.steps[-1].kind == "eager" and "is on cpu" in tree.trace.steps[-1].reason
    with pytest.raises(ValueError, match="does not exist"):
        cgviz.Tree(f"cuda:{torch.cuda.device_count()}")
