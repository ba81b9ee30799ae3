"""Observing changes torch's classes once per process, at the first observation, and a tree
manager not at all: its class stays torch's, and its attributes stay where CPython reads them
fastest. (Switching a manager's class to a subclass moved its attributes into a dict for good,
every read about three times as slow; from Python 3.13 a class assigned to about a thousand
times loses its attribute cache for good, which wrapping torch's manager class and putting it
back at each observation reached in some 60 observations.)"""

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
    made without CUDA (object.__new__): only their class and attributes matter."""
    return trees().get_container(0)


def fake_manager():
    return object.__new__(layout.manager_class())


def inline(obj, value) -> bool:
    """Whether `value`, an attribute of `obj`, is held in the object's own inline values (CPython
    3.11+, where the garbage collector visits them directly), not in a dict of its attributes."""
    return any(ref is value for ref in gc.get_referents(obj))


def looked_up(cls: type) -> None:
    """A lookup in the class itself, as torch's code makes: gives a changed class a new version tag."""
    getattr(cls, "no_such_member_of_torchs", None)


def torch_classes() -> list[type]:
    found = [layout.manager_class(), layout.convert_frame_class(), layout.scheduler_class(),
             layout.graph_break_class(), layout.compiled_graph_class()]
    return [cls for cls in found if cls is not None]


def is_wrapper(member) -> bool:
    return getattr(member, "__module__", None) == _hooks.__name__


@pytest.mark.parametrize("level", ["events", "full"])
def test_a_manager_keeps_torchs_class_and_its_attributes_their_place(container, level):
    manager = container.tree_manager = fake_manager()
    held = manager.current_node = object()
    if not inline(manager, held):
        pytest.skip("this Python keeps no inline attribute values")
    base = layout.manager_class()
    with tc.observe_torch(trace=level):
        assert type(manager) is base and inline(manager, held)
        assert is_wrapper(vars(base)[layout.run_method(base)])
        assert is_wrapper(vars(base)[layout.HOOKED_METHODS["execute"]])
    assert type(manager) is base and inline(manager, held)
    with pytest.raises(KeyError):
        with tc.observe_torch(trace=level):
            raise KeyError("the user's own error")
    assert type(manager) is base and inline(manager, held)


def test_the_hooks_stay_after_the_last_observation(container):
    base = layout.manager_class()
    tc.stop_observing(tc.start_observing("events"))
    assert not _hooks.ACTIVE
    name = layout.HOOKED_METHODS["dealloc"]
    wrapper = vars(base)[name]
    assert is_wrapper(wrapper)
    tc.stop_observing(tc.start_observing("events"))
    assert vars(base)[name] is wrapper, "wrapped again at the second observation"
    roles = _hooks.hooked_roles()
    assert {"run", "execute", "path_clear", "post_compile"} <= roles
    wrapped = {name for _, name, _ in _hooks._CLASS_HOOKS}
    assert layout.COMPILED_GRAPH_MEMBERS[0] in wrapped and layout.HOOKED_METHODS["record"] in wrapped


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
    """The hooks go in once; after that, observing assigns to no class of torch's."""
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
        tc.stop_observing(observer)
        for cls in classes:
            looked_up(cls)
    assert [testcapi.type_get_version(cls) for cls in classes] == versions
    assert [dict(vars(cls)) for cls in classes] == contents


@pytest.fixture
def unhooked(monkeypatch):
    """torch's manager class as before the first observation of a process (put back afterwards)."""
    base = layout.manager_class()
    for owner, name, original in list(_hooks._CLASS_HOOKS):
        if owner is base:
            if original is _hooks._ABSENT:
                monkeypatch.delattr(base, name)
            else:
                monkeypatch.setattr(base, name, original)
    monkeypatch.setattr(_hooks, "_CLASS_HOOKS", [h for h in _hooks._CLASS_HOOKS if h[0] is not base])
    assert not any(is_wrapper(member) for member in vars(base).values())
    return base


def test_a_failed_start_leaves_nothing_observed(unhooked, monkeypatch):
    before = dict(vars(unhooked))
    modules = [importlib.import_module(m) for m in layout.SKIP_LOGGER_MODULES]
    loggers = [getattr(m, layout.SKIP_LOGGER, None) for m in modules]
    handlers = list(logging.getLogger(layout.TREES_LOGGER).handlers)

    def broken(original):
        raise RuntimeError("cannot wrap")

    monkeypatch.setitem(_hooks.WRAPPERS, "dealloc", broken)
    with pytest.raises(RuntimeError, match="cannot wrap"):
        tc.start_observing("events")
    assert _hooks.ACTIVE == []
    after = dict(vars(unhooked))
    assert after.keys() == before.keys() and all(after[name] is before[name] for name in before)
    assert [getattr(m, layout.SKIP_LOGGER, None) for m in modules] == loggers
    assert logging.getLogger(layout.TREES_LOGGER).handlers == handlers


def test_the_first_observation_wraps_every_method_once(unhooked):
    tc.stop_observing(tc.start_observing("events"))
    names = [name for _, name, _ in _hooks.manager_hooks(unhooked)]
    assert names and all(is_wrapper(vars(unhooked)[name]) for name in names)
    assert len([h for h in _hooks._CLASS_HOOKS if h[0] is unhooked]) == len(names)


def test_a_method_replaced_since_is_wrapped_again(monkeypatch):
    base = layout.manager_class()
    tc.stop_observing(tc.start_observing("events"))
    name = layout.HOOKED_METHODS["execute"]

    def patched(self, node, *args, **kwargs):
        return "patched"

    monkeypatch.setattr(base, name, patched)
    tc.stop_observing(tc.start_observing("events"))
    again = vars(base)[name]
    assert again is not patched and is_wrapper(again)
    assert again(fake_manager(), None) == "patched"  # nothing observed now: passed straight on


def test_a_hooked_method_answers_introspection_as_torchs_own(unhooked):
    """torch's class keeps the hooks for the process: code that reads a method's signature or
    name (torch's own tests do) sees torch's."""
    import inspect

    originals = {name: getattr(unhooked, name) for _, name, _ in _hooks.manager_hooks(unhooked)}
    tc.stop_observing(tc.start_observing("events"))
    for name, original in originals.items():
        hooked = getattr(unhooked, name)
        assert hooked is not original and is_wrapper(hooked)
        assert inspect.signature(hooked) == inspect.signature(original), name
        assert (hooked.__name__, hooked.__qualname__, hooked.__doc__) == (
            original.__name__, original.__qualname__, original.__doc__)
