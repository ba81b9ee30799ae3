"""cgviz.observe_torch: hooks come and go cleanly; the traces it recorded on a GPU read back."""

import pytest

from cgviz.data import torch_trace, torch_trace_names
from cgviz.observe.torch_compile import observe_torch, start_observing, stop_observing


def test_hooks_are_removed_on_exit_and_on_exception():
    from torch._inductor import cudagraph_trees as trees

    original = trees.CUDAGraphTreeManager._run
    with observe_torch(trace="events"):
        assert trees.CUDAGraphTreeManager._run is not original
    assert trees.CUDAGraphTreeManager._run is original
    with pytest.raises(KeyError):
        with observe_torch():
            raise KeyError("user error")
    assert trees.CUDAGraphTreeManager._run is original


def test_nested_observers_keep_hooks_until_the_last_stops():
    from torch._inductor import cudagraph_trees as trees

    original = trees.CUDAGraphTreeManager.execute_node
    outer = start_observing("events")
    inner = start_observing("events")
    stop_observing(inner)
    assert trees.CUDAGraphTreeManager.execute_node is not original
    stop_observing(outer)
    assert trees.CUDAGraphTreeManager.execute_node is original


def test_bad_trace_level_is_a_clear_error():
    with pytest.raises(ValueError, match="'events' or 'full'"):
        start_observing("verbose")


def test_recorded_training_trace_has_the_backward_under_the_forward():
    trace = torch_trace("torch_training")
    records = [s for s in trace.steps if s.kind == "record"]
    fwd = [s for s in records if "(forward)" in s.function]
    bwd = [s for s in records if "(backward)" in s.function]
    assert fwd and bwd and bwd[0].parent == fwd[0].node
    assert trace.meta["backend"] == "torch.compile"


def test_recorded_traces_cover_the_cases():
    assert torch_trace_names() == [
        "torch_cpu_input", "torch_dynamic_shapes", "torch_inference", "torch_overwritten", "torch_training",
    ]
    assert torch_trace("torch_overwritten").steps[-1].kind == "error"
    assert any(s.kind == "eager" and "skipping cudagraphs" in s.reason.lower() for s in torch_trace("torch_cpu_input").steps)
    dyn = torch_trace("torch_dynamic_shapes").last_snapshot()
    assert len([n for n in dyn.nodes if n.kind == "graph" and n.parent is None]) >= 3


def test_new_generation_check_agrees_with_torchs_own():
    """The observer reads the generation counters itself; torch's method must agree in every state."""
    import itertools

    from torch._inductor import cudagraph_trees as trees

    from cgviz.observe import _torch_layout as layout

    own = trees.CUDAGraphTreeManager.__dict__
    names = ("can_start_new_generation", "in_new_torch_compile_invocation", "get_curr_generation", "user_invoked_mark_step")
    # torch's own methods (static ones included), on an object without a GPU behind it
    Manager = type("Manager", (), {name: own[name] for name in names})

    ended = []
    hook = layout.path_clear_hook(lambda m: setattr(m, "current_node", None), ["observer"],
                                  lambda obs, m: ended.append("generation"),
                                  lambda obs, m, before: ended.append(f"path end after {before}"))
    saved = trees.MarkStepBox.mark_step_counter, trees.GenerationTracker.generation
    seen = set()
    try:
        for counter, generation, current, pending in itertools.product((0, -1, -2), (0, 3), (-2, -1, 0, 3), (False, True)):
            trees.MarkStepBox.mark_step_counter, trees.GenerationTracker.generation = counter, generation
            m = Manager()
            m.current_gen, m.running_forwards_with_pending_backwards = current, pending
            expected = m.can_start_new_generation()
            seen.add(expected)
            assert layout.starts_new_generation(m) == expected, (counter, generation, current, pending)
            m.current_node = "node 4"
            hook(m)  # the wrapper of clear_current_path_state_and_set_to_none reads the counters itself
            assert m.current_node is None
            assert ended.pop() == ("generation" if expected else "path end after node 4")
    finally:
        trees.MarkStepBox.mark_step_counter, trees.GenerationTracker.generation = saved
    assert seen == {True, False}


def test_warmup_outputs_without_metadata_say_so_in_every_view():
    """torch keeps no shape or dtype for its warmup runs' outputs: no view may show '[] 0 B'."""
    from cgviz.views.html import to_html
    from cgviz.views.tree import builtin_tree_svg, to_dot
    from cgviz.widgets.explorer import output_table_html

    trace = torch_trace("torch_training")
    snap = trace.last_snapshot()
    warmups = [n for n in snap.nodes if n.kind == "warmup"]
    assert warmups and all(not o.described for n in warmups for o in n.outputs)
    assert all(o.described for n in snap.nodes if n.kind == "graph" for o in n.outputs)
    for text in (builtin_tree_svg(snap), to_dot(snap)):
        assert "0: shape not recorded" in text and "[] 0 B" not in text
    table = output_table_html(warmups[0])
    assert "not recorded" in table and "0 B" not in table
    page = to_html(trace, renderer="builtin")
    assert "not recorded" in page and "0: [] 0 B" not in page
