"""Every private name of torch that cgviz.observe relies on (listed in _torch_layout/) exists
in the installed torch. A CPU build ships torch._inductor.cudagraph_trees but cannot make a
tree manager, so this checks by introspection: module attributes, class attributes and methods,
dataclass fields, and instance attributes found as `self.<name> = ...` in the classes' source.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
from pathlib import Path

import pytest
import torch

from cgviz.observe import _torch_layout as layout

OBSERVE = Path(layout.__file__).parent


def trees():
    return importlib.import_module(layout.TREES_MODULE)


def assigned_on_self(cls: type) -> set[str]:
    """Names that the methods of `cls` (and of its bases) assign as `self.<name> = ...`."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        for node in ast.walk(ast.parse(source)):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self":
                        names.add(part.attr)
    return names


def members(cls: type) -> set[str]:
    """What an instance of `cls` has: class attributes, methods, dataclass fields, instance attributes."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return set(dir(cls)) | fields | assigned_on_self(cls)


def alternatives(entry) -> tuple:
    return entry if isinstance(entry, tuple) else (entry,)


def listed_names() -> set[str]:
    """Every member name the layout lists, alternatives included."""
    return {name for entries in layout.CLASS_MEMBERS.values() for e in entries for name in alternatives(e)}


MEMBER_CASES = [(cls, entry) for cls, entries in layout.CLASS_MEMBERS.items() for entry in entries]


@pytest.mark.parametrize("name", sorted({*layout.CLASS_MEMBERS, layout.MANAGER_CLASS, layout.WARMUP_NODE_CLASS}))
def test_module_has_the_class(name):
    assert hasattr(trees(), name), f"{layout.TREES_MODULE} has no {name} in torch {torch.__version__}"


@pytest.mark.parametrize(
    "cls, entry", MEMBER_CASES, ids=[f"{c}.{'|'.join(alternatives(e))}" for c, e in MEMBER_CASES]
)
def test_class_has_the_member(cls, entry):
    """Every name the layout lists is in this torch, except those its release does not have yet
    (or any more, layout.SINCE / UNTIL): those must be absent, so the release table is checked too."""
    have = members(getattr(trees(), cls))
    expected = [name for name in alternatives(entry) if layout.has_since(f"{cls}.{name}")]
    for name in set(alternatives(entry)) - set(expected):
        assert name not in have, f"{cls}.{name} is in torch {torch.__version__}: layout.SINCE/UNTIL says it is not"
    if not expected:
        return
    assert any(name in have for name in expected), (
        f"{cls} has none of {alternatives(entry)} in this torch: cgviz/observe/_torch_layout/ needs updating"
    )


WRAPPED = [layout.RUN_METHODS, *layout.HOOKED_METHODS.values()]


@pytest.mark.parametrize("name", WRAPPED, ids=["|".join(alternatives(n)) for n in WRAPPED])
def test_wrapped_methods_are_methods_of_the_manager(name):
    """The observer's subclass overrides these: an instance attribute could not be wrapped."""
    manager = getattr(trees(), layout.MANAGER_CLASS)
    if not any(layout.has_since(f"{layout.MANAGER_CLASS}.{n}") for n in alternatives(name)):
        assert not any(hasattr(manager, n) for n in alternatives(name))  # a later release's method
        return
    found = [n for n in alternatives(name) if inspect.isfunction(getattr(manager, n, None))]
    assert found, f"{layout.MANAGER_CLASS} has no method {' or '.join(alternatives(name))}"
    assert layout.run_method(manager) in layout.RUN_METHODS


def test_a_module_has_the_skip_logger():
    having = [m for m in layout.SKIP_LOGGER_MODULES if callable(getattr(importlib.import_module(m), layout.SKIP_LOGGER, None))]
    assert having, f"none of {layout.SKIP_LOGGER_MODULES} has {layout.SKIP_LOGGER}"


def test_instance_attributes_are_found_in_the_source():
    """The source check sees assignments in __init__ (not on the class): it can tell a rename."""
    manager = getattr(trees(), layout.MANAGER_CLASS)
    found = assigned_on_self(manager)
    assert "roots" in found and not hasattr(manager, "roots")
    assert "roots_renamed" not in members(manager)


def names_the_observer_reads() -> set[str]:
    """Private names read in cgviz/observe: read(obj, "name") literals, `manager.<name>`
    anywhere and `self.<name>` in _install's wrappers (their `self` is torch's manager)."""
    found: set[str] = set()
    for path in OBSERVE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_install"]
        for scope in scopes:
            owner_names = {"manager"} if scope is tree else {"self"}
            for node in ast.walk(scope):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "read":
                    if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                        found.add(node.args[1].value)
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in owner_names:
                    found.add(node.attr)
    return found


def test_the_layout_lists_every_private_name_the_observer_reads():
    read = names_the_observer_reads()
    assert {"current_node", "roots", "current_gen"} <= read  # the scan sees both files
    missing = sorted(read - listed_names())
    assert not missing, f"cgviz/observe reads {missing} without listing them in _torch_layout.CLASS_MEMBERS"


def test_torch_c_counts_a_storages_users():
    """The count the observer reads for an output's liveness, as StorageWeakRefWrapper.expired() does."""
    count = getattr(torch._C, layout.STORAGE_USE_COUNT)
    t = torch.zeros(2)
    before = count(t.untyped_storage()._cdata)
    view = t[1:]
    assert count(t.untyped_storage()._cdata) == before + 1
    del view
