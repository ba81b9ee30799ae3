"""The layers point one way: hosts → views → trace; producers (engine, observe) → _torch → trace.

Every import of a cgviz module by another (at the top or inside a function) is read from the
sources. A forbidden one fails the test.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cgviz"
LEAVES = {"_version", "progress"}  # import nothing of cgviz: any layer may use them
LAYERS = {"trace": set(), "views": {"trace"}, "_torch": {"trace"}, "engine": {"trace", "_torch"},
          "observe": {"trace", "_torch"}}
# hosts (widgets, magics, cli, run, data, scenarios, ...) may import every layer

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
    new = sorted(forbidden())
    assert new == [], "forbidden imports (hosts → views → trace; engine, observe → _torch → trace):\n" + "\n".join(
        f"  {file} imports cgviz.{module}" for file, module in new)


def test_the_leaves_import_nothing_of_cgviz():
    for leaf in LEAVES:
        assert cgviz_imports(PACKAGE / f"{leaf}.py") == set()


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from cgviz.views.text import headline\n    import cgviz.engine.tree\n")
    assert cgviz_imports(source) == {"views.text", "engine.tree"}


def torch_names(path: Path) -> set[str]:
    """The names of torch a file reads: `torch.a.b` chains, `from torch.a import b`, "torch.a" strings."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute):
            parts, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                parts.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id == "torch":
                found.add(".".join(["torch"] + parts[::-1]))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("torch.") \
                and not any(c.isspace() for c in node.value):  # a name, not a docstring
            found.add(node.value)
    return found


def test_the_torch_layer_reads_only_public_names_of_torch():
    """Private names of torch stay in engine/_torch_compat.py and observe/_torch_layout/."""
    for path in sorted((PACKAGE / "_torch").glob("*.py")):
        private = [n for n in torch_names(path) if any(p.startswith("_") and not p.startswith("__") for p in n.split("."))]
        assert private == [], f"_torch/{path.name} reads private names of torch: {private}"


def test_the_torch_names_check_sees_private_ones(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import sys\nimport torch\nfrom torch._dynamo import config\ntorch._C._cuda_x()\n"
                      "sys.modules.get('torch._dynamo.config')\ntorch.cuda.memory_snapshot()\n")
    assert torch_names(source) == {"torch._dynamo.config", "torch._C", "torch._C._cuda_x",
                                   "torch.cuda", "torch.cuda.memory_snapshot"}
