"""The layers point one way: hosts → views → trace; producers (engine, observe) → trace.

Every import of a cgviz module by another (at the top or inside a function) is read from the
sources. A forbidden one fails the test, unless it is one of the few known ones below, each
with the reason it is still there; a known one that is gone must be taken off the list, so the
list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cgviz"
LEAVES = {"_version", "progress"}  # import nothing of cgviz: any layer may use them
LAYERS = {"trace": set(), "views": {"trace"}, "engine": {"trace"}, "observe": {"trace"}}
# hosts (widgets, magics, cli, run, data, scenarios, ...) may import every layer

KNOWN = {
    # the private torch names the two producers share; to move below both (cgviz/_torch/)
    ("observe/_hooks.py", "engine._torch_compat"),
    ("observe/_hooks.py", "engine.kernels"),
    ("observe/_torch_layout.py", "engine._torch_compat"),
    ("observe/_torch_layout.py", "engine.rules"),
    ("observe/observer.py", "engine.cuda"),
}


def layer_of(relative: str) -> str:
    return relative.split("/", 1)[0].removesuffix(".py") if "/" in relative else relative.removesuffix(".py")


def cgviz_imports(path: Path) -> set[str]:
    """The cgviz modules a file imports ("views.text"), wherever in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "cgviz":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("cgviz."):
                module = node.module.removeprefix("cgviz.")
                folder = PACKAGE.joinpath(*module.split("."))
                for alias in node.names:  # `from cgviz.engine import rules` imports cgviz.engine.rules
                    found.add(f"{module}.{alias.name}" if (folder / f"{alias.name}.py").exists() else module)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("cgviz.") for a in node.names if a.name.startswith("cgviz."))
    return found


def forbidden() -> set[tuple[str, str]]:
    out = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        layer = layer_of(relative)
        if layer not in LAYERS:
            continue
        for module in cgviz_imports(path):
            target = module.split(".", 1)[0]
            if target != layer and target not in LEAVES and target not in LAYERS[layer]:
                out.add((relative, module))
    return out


def test_no_layer_imports_one_above_it_or_the_other_producer():
    new = sorted(forbidden() - KNOWN)
    assert new == [], "forbidden imports (hosts → views → trace; engine, observe → trace):\n" + "\n".join(
        f"  {file} imports cgviz.{module}" for file, module in new)


def test_every_known_exception_is_still_there():
    gone = sorted(KNOWN - forbidden())
    assert gone == [], f"no longer imported, take them off KNOWN: {gone}"


def test_the_leaves_import_nothing_of_cgviz():
    for leaf in LEAVES:
        assert cgviz_imports(PACKAGE / f"{leaf}.py") == set()


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from cgviz.views.text import headline\n    import cgviz.engine.tree\n")
    assert cgviz_imports(source) == {"views.text", "engine.tree"}
