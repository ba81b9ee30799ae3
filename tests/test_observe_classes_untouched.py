"""Observing changes none of torch's classes after the first observation: a manager is observed
by switching its class to an observed subclass and back. (From Python 3.13 a class assigned to
about a thousand times loses its attribute cache for good; wrapping torch's manager class and
putting it back at each observation reached that in some 60 observations.)"""

from __future__ import annotations

import gc
import importlib
import logging
import weakref

import pytest

from cgviz.observe import _hooks
from cgviz.observe import _torch_layout as layout
from cgviz.observe import torch_compile as tc

def trees():
    return importlib.import_module(layout.TREES_MODULE)


@pytest.fixture
def container(hold_manager):
    """Device 0's container in torch's own table (put back afterwards). Its managers here are
    made without CUDA (object.__new__): only their class matters."""
    return trees().get_container(0)


def fake_manager():
    return object.__new__(layout.manager_class())


def looked_up(cls: type) -> None:
    """A lookup in the class itself, as torch's code makes: gives a changed class a new version tag."""
    getattr(cls, "no_such_member_of_torchs", None)


def torch_classes() -> list[type]:
    found = [layout.manager_class(), layout.container_class(), layout.convert_frame_class(),
             layout.scheduler_class(), layout.graph_break_class(), layout.compiled_graph_class()]
    return [cls for cls in found if cls is not None]


@pytest.mark.parametrize("level", ["events", "full"])
def test_a_held_manager_is_observed_through_its_class_and_given_back(container, level):
    manager = container.tree_manager = fake_manager()
    base = layout.manager_class()
    before = dict(vars(base))
    with tc.observe_torch(trace=level):
        assert type(manager) is not base and isinstance(manager, base)
        assert type(manager)._run is not base._run and type(manager).__name__ == base.__name__
        assert dict(vars(base)) == before
    assert type(manager) is base
    with pytest.raises(KeyError):
        with tc.observe_torch(trace=level):
            assert type(manager) is not base
            raise KeyError("the user's own error")
    assert type(manager) is base
    after = dict(vars(base))
    assert after.keys() == before.keys() and all(after[name] is before[name] for name in before)


def test_nested_observations_keep_a_manager_observed_until_the_last_stops(container):
    manager = container.tree_manager = fake_manager()
    base = layout.manager_class()
    outer = tc.start_observing("events")
    inner = tc.start_observing("events")
    tc.stop_observing(inner)
    assert type(manager) is not base
    tc.stop_observing(outer)
    assert type(manager) is base


def test_a_manager_torch_gives_out_while_observed_is_observed_from_then_on(container):
    base = layout.manager_class()
    observer = tc.start_observing("events")
    try:
        container.tree_manager = fake_manager()  # as get_tree_manager makes it for a new compile
        manager = container.get_tree_manager()
        assert manager is container.tree_manager and type(manager) is not base
    finally:
        tc.stop_observing(observer)
    assert type(manager) is base
    assert type(container.get_tree_manager()) is base  # nothing observed: passed straight on


def test_a_manager_torch_lets_go_while_observed_is_freed_at_once(container):
    """Observing adds no reference to a manager: torch frees it (and its pool) when it lets go."""
    container.tree_manager = fake_manager()
    gone = weakref.ref(container.tree_manager)
    observer = tc.start_observing("events")
    gc.disable()
    try:
        container.tree_manager = None
        assert gone() is None, "the observed manager outlived torch's last reference"
    finally:
        gc.enable()
        tc.stop_observing(observer)


def test_many_observations_change_no_class_of_torchs(container):
    """The compile-time hooks go in once; after that, observing assigns to no class of torch's."""
    testcapi = pytest.importorskip("_testcapi")
    tc.stop_observing(tc.start_observing("events"))  # the first observation puts them in
    classes = torch_classes()
    for cls in classes:
        looked_up(cls)
    versions = [testcapi.type_get_version(cls) for cls in classes]
    assert all(versions)
    contents = [dict(vars(cls)) for cls in classes]
    for _ in range(30):
        container.tree_manager = fake_manager()
        observer = tc.start_observing("events")
        container.get_tree_manager()
        tc.stop_observing(observer)
        for cls in classes:
            looked_up(cls)
    assert [testcapi.type_get_version(cls) for cls in classes] == versions
    assert [dict(vars(cls)) for cls in classes] == contents


def test_the_compile_hooks_pass_straight_on_while_nothing_is_observed(container):
    tc.stop_observing(tc.start_observing("events"))
    assert not _hooks.ACTIVE
    wrapped = {name for _, name, _ in _hooks._COMPILE_HOOKS}
    assert layout.CONTAINER_MAKER in wrapped and layout.COMPILED_GRAPH_MEMBERS[0] in wrapped
    manager = container.tree_manager = fake_manager()
    assert container.get_tree_manager() is manager and type(manager) is layout.manager_class()


def test_a_failed_start_leaves_nothing_observed(container, monkeypatch):
    manager = container.tree_manager = fake_manager()
    modules = [importlib.import_module(m) for m in layout.SKIP_LOGGER_MODULES]
    loggers = [getattr(m, layout.SKIP_LOGGER, None) for m in modules]
    handlers = list(logging.getLogger(layout.TREES_LOGGER).handlers)

    def broken(original):
        raise RuntimeError("cannot wrap")

    monkeypatch.setattr(_hooks, "_OBSERVED", {})  # made again, with the broken wrapper
    monkeypatch.setitem(_hooks.WRAPPERS, "dealloc", broken)
    with pytest.raises(RuntimeError, match="cannot wrap"):
        tc.start_observing("events")
    assert _hooks.ACTIVE == [] and type(manager) is layout.manager_class()
    assert [getattr(m, layout.SKIP_LOGGER, None) for m in modules] == loggers
    assert logging.getLogger(layout.TREES_LOGGER).handlers == handlers


def test_a_subclass_is_made_again_where_torchs_method_was_replaced(monkeypatch):
    base = layout.manager_class()
    first = _hooks.observed_class(base)
    assert _hooks.observed_class(base) is first
    name = layout.HOOKED_METHODS["execute"]

    def patched(self, node, *args, **kwargs):
        return "patched"

    monkeypatch.setattr(base, name, patched)
    again = _hooks.observed_class(base)
    assert again is not first
    assert getattr(again, name)(object.__new__(again), None) == "patched"
