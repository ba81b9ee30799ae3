"""Every wrapper the observer puts on torch's tree manager, called as torch calls that method in
each recorded release (tests/data/torch_surface): the original receives exactly the arguments
given. torch 2.14 began calling clear_current_path_state_and_set_to_none() with keyword
arguments; a wrapper that took only the manager raised a TypeError at every new generation."""

from __future__ import annotations

import pytest

from cgviz.observe import _hooks
from cgviz.observe import _torch_layout as layout
from torch_surface import RELEASES, call_like, compare_release, load_surface, strict_original


class Manager:
    """What the wrappers read of a manager, in its quiet state (no path, nothing recorded)."""

    current_node = None
    current_gen = 0
    running_forwards_with_pending_backwards = False
    in_recording = False
    warned_functions: set = set()
    roots: dict = {}
    active_warmup_function = None


class Observer:
    """An active observer that takes every event and does nothing with it."""

    depth = 0
    level = "events"
    read_kernels = False
    decisions = 0

    def watch_call(self, run, manager, args, kwargs):
        return run(manager, *args, **kwargs)

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


ROLES = [("run", name) for name in layout.RUN_METHODS] + list(layout.HOOKED_METHODS.items())
CASES = [(release, role, name) for release in RELEASES for role, name in ROLES]


@pytest.mark.parametrize("release, role, name", CASES, ids=[f"{r}-{n}" for r, _, n in CASES])
def test_a_wrapper_passes_torchs_arguments_through_unchanged(release, role, name):
    surface = load_surface(release)
    key = f"{layout.MANAGER_CLASS}.{name}"
    if not surface.has_member(layout.MANAGER_CLASS, name):
        since = layout.SINCE.get(key)
        assert name in layout.RUN_METHODS or (since and compare_release(release, since) < 0), (
            f"torch {release} has no {key}, and layout.SINCE does not say so")
        return
    signature = surface.signature(layout.MANAGER_CLASS, name)
    original = strict_original(signature, name=name)
    wrapper = (_hooks.wrap_run if role == "run" else _hooks.WRAPPERS[role])(original)
    manager = Manager()
    args, kwargs = call_like(signature, manager)
    for active in ([], [Observer()]):  # not observing (a wrapper left behind), and observing
        _hooks.ACTIVE[:] = active
        try:
            wrapper(*args, **kwargs)
        finally:
            _hooks.ACTIVE.clear()
    assert len(original.calls) == 2
    for call in original.calls:
        assert call.args == args and call.kwargs == kwargs, f"{name} of torch {release} got other arguments"


def test_the_2_14_keyword_arguments_are_among_those_checked():
    """The case that broke: 2.14 and 2.15 pass clone_live_user_visible_outputs= and
    dealloc_current_path_weakrefs= by keyword; 2.13 has neither."""
    name = layout.HOOKED_METHODS["path_clear"]
    for release in RELEASES:
        params = load_surface(release).signature(layout.MANAGER_CLASS, name).parameters
        has = {"clone_live_user_visible_outputs", "dealloc_current_path_weakrefs"} <= set(params)
        assert has is (compare_release(release, "2.14") >= 0), release
