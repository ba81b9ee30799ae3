#!/usr/bin/env python3
"""Write the *surface* of a torch release that cgviz relies on, as a small JSON file.

cgviz observes torch's CUDA graph trees through private names (cgviz/observe/_torch_layout/,
cgviz/engine/_torch_compat.py). This script reads a release's sources, never importing or
running them (stdlib `ast` only), and records what those names could refer to, for five files:

    torch/_inductor/cudagraph_trees.py   torch/_inductor/cudagraph_utils.py
    torch/_inductor/config.py            torch/cuda/graphs.py
    torch/compiler/__init__.py

tests/test_torch_surface.py then checks cgviz's declared names against every recorded release,
on a CPU and without any torch sources at hand.

Adding a release (one command; the release is read from the wheel's or the folder's name):

    python scripts/torch_surface.py torch-2.16.0-cp312-cp312-manylinux_2_28_x86_64.whl -o tests/data/torch_surface/

SOURCE is a torch wheel (only the five files above are read from it) or a folder holding
`torch/...` (such as torch-src/2.15.0, a folder holding a release's torch/ tree). `--release` names the release where the
name does not. `-o` is a file, or a folder to write `<release>.json` in; without it the JSON is
printed. `--check` compares with the existing `-o` file instead of writing it (exit status 1
when they differ). Errors (a missing path, a folder or wheel without the files, a corrupt
wheel, an -o path that can't be written) exit with status 2 and say what is wrong.

The JSON (format 1) has sorted keys, "format", "release", and "files", which maps each file's
path inside the release to (empty entries left out):

    functions           {name: def}          module-level functions
    classes             {name: {...}}        module-level classes (not for config.py), each with
        bases, decorators                    source text
        methods                              {name: def}
        properties                           @property / @cached_property names
        class_attributes                     names assigned or annotated in the class body
        instance_attributes                  `self.X = ...` / `self.X: T = ...` in its methods
        enum_members                         of an Enum class (then not in class_attributes)
    assigned            module-level names assigned (those under `if TYPE_CHECKING:` left out)
    imports             {bound name: "module.name"} of module-level imports
    c_names             the chains after `torch._C.` the file references, imports from torch._C
                        included ("_cuda_releasePool", "_dynamo.eval_frame.set_guard_complete_hook")
    config              config.py only, instead of classes and assigned: {option: default}, a
                        nested config class being {option: default} of its own (with the options
                        of the config class it inherits from: `class cuda(cutlass)`)

A def is a list in Python's own notation: its decorators ("@staticmethod"), then its
parameters: "name", "name=default", "/" after the positional-only ones, "*" or "*args" before
the keyword-only ones, "**kwargs". A default (here and in config) is its source text
(ast.unparse), or "<long>" where that is longer than 60 characters. ast.unparse's text can differ
a little between Pythons: write all releases with one Python (the test that reproduces them runs
this script with the interpreter running the tests).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any, Iterator, Optional

FORMAT = 1
TREES_FILE = "torch/_inductor/cudagraph_trees.py"
CONFIG_FILE = "torch/_inductor/config.py"
FILES = (
    TREES_FILE,
    "torch/_inductor/cudagraph_utils.py",
    CONFIG_FILE,
    "torch/cuda/graphs.py",
    "torch/compiler/__init__.py",
)
MAX_DEFAULT = 60
LONG = "<long>"
LINE_WIDTH = 100
PROPERTY_DECORATORS = {"property", "cached_property", "abstractproperty"}
ENUM_BASES = {"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "ReprEnum"}
RELEASE = re.compile(r"v?(\d+\.\d+(?:\.\d+)?(?:(?:a|b|rc|\.dev|\.post)\d+)*)")


class SurfaceError(Exception):
    """A problem with the command's input or output, reported with exit status 2."""


# -- reading the sources --------------------------------------------------------------------------


def read_sources(source: Path) -> dict[str, str]:
    """{path inside the release: text} of the files of FILES that `source` has."""
    if not source.exists():
        raise SurfaceError(f"{source}: no such file or folder")
    if source.is_dir():
        found = {name: source / name for name in FILES if (source / name).is_file()}
        if TREES_FILE not in found:
            raise SurfaceError(
                f"{source}: not a torch source folder (it has no {TREES_FILE}; "
                "give the folder that holds torch/, or a torch wheel)"
            )
        try:
            return {name: path.read_text(encoding="utf-8") for name, path in found.items()}
        except (OSError, UnicodeDecodeError) as e:
            raise SurfaceError(f"{source}: can't read {e}") from e
    if not zipfile.is_zipfile(source):
        raise SurfaceError(f"{source}: not a torch wheel (not a zip file, or a corrupt one)")
    try:
        with zipfile.ZipFile(source) as wheel:
            present = set(wheel.namelist())
            if TREES_FILE not in present:
                raise SurfaceError(f"{source}: this wheel has no {TREES_FILE} (is it a torch wheel?)")
            return {name: wheel.read(name).decode("utf-8") for name in FILES if name in present}
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, UnicodeDecodeError) as e:
        raise SurfaceError(f"{source}: corrupt wheel ({e})") from e


def release_of(source: Path) -> Optional[str]:
    """The release a folder's name ("2.15.0", "torch-2.15.0") or a wheel's name
    ("torch-2.15.0+cu128-cp312-...whl", the local label dropped) says, or None."""
    name = source.name
    if name.endswith(".whl"):
        parts = name[: -len(".whl")].split("-")
        candidate = parts[1].split("+")[0] if len(parts) >= 2 else ""
    else:
        candidate = name[len("torch-"):] if name.startswith("torch-") else name
    match = RELEASE.fullmatch(candidate)
    return match.group(1) if match else None


# -- the surface of one file ----------------------------------------------------------------------


def source_text(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= MAX_DEFAULT else LONG


def params(args: ast.arguments) -> list[str]:
    """The parameters in Python's own notation: ["self", "inputs", "/", "*", "mode=None",
    "*args", "**kwargs"] ("/" ends the positional-only ones, a lone "*" starts keyword-only ones)."""
    positional = [*args.posonlyargs, *args.args]
    defaults: list[Optional[ast.expr]] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = []
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        out.append(arg.arg if default is None else f"{arg.arg}={source_text(default)}")
        if args.posonlyargs and i == len(args.posonlyargs) - 1:
            out.append("/")
    if args.vararg is not None:
        out.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        out.append("*")
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        out.append(arg.arg if default is None else f"{arg.arg}={source_text(default)}")
    if args.kwarg is not None:
        out.append("**" + args.kwarg.arg)
    return out


def decorator_names(node: ast.AST) -> list[str]:
    """Decorators' source text, calls shown by what they call: ["staticmethod", "dataclasses.dataclass"]."""
    return [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in getattr(node, "decorator_list", [])]


def function_entry(node: ast.AST) -> list[str]:
    """A def as a list: its decorators ("@staticmethod"), then its parameters (see `params`)."""
    return [f"@{d}" for d in decorator_names(node)] + params(node.args)  # type: ignore[attr-defined]


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a module or class body, those in if/try/with blocks included (but not
    those only type checkers see, under `if TYPE_CHECKING:`)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            if not is_type_checking(stmt.test):
                yield from statements(stmt.body)
            yield from statements(stmt.orelse)
        elif isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            yield from statements(stmt.body)
            for handler in stmt.handlers:
                yield from statements(handler.body)
            yield from statements(stmt.orelse)
            yield from statements(stmt.finalbody)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            yield from statements(stmt.body)
        else:
            yield stmt


def target_names(target: ast.expr) -> Iterator[ast.expr]:
    """The single targets of an assignment target (tuples and starred unpacked)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from target_names(element)
    elif isinstance(target, ast.Starred):
        yield from target_names(target.value)
    else:
        yield target


def assignments(stmt: ast.stmt) -> list[tuple[ast.expr, Optional[ast.expr]]]:
    """(target, value) of each single target the statement assigns; value None for a bare
    annotation (`x: int`), the whole value for unpacking."""
    if isinstance(stmt, ast.Assign):
        return [(t, stmt.value) for target in stmt.targets for t in target_names(target)]
    if isinstance(stmt, ast.AnnAssign):
        return [(stmt.target, stmt.value)]
    if isinstance(stmt, ast.AugAssign):
        return [(stmt.target, stmt.value)]
    return []


def is_function(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))


def add_function(table: dict[str, Any], stmt: ast.stmt) -> None:
    """Record a def; an @overload stub does not replace the implementation."""
    entry = function_entry(stmt)
    name = stmt.name  # type: ignore[attr-defined]
    if is_overload(entry) and name in table and not is_overload(table[name]):
        return
    table[name] = entry


def is_overload(entry: list[str]) -> bool:
    return any(p.startswith("@") and p.split(".")[-1] == "overload" for p in entry)


def self_names(stmt: ast.stmt) -> set[str]:
    """The names a method's instance goes by: `self`, and the first parameter of a method that
    is given the instance."""
    names = {"self"}
    decorators = {d.split(".")[-1] for d in decorator_names(stmt)}
    positional = [*stmt.args.posonlyargs, *stmt.args.args]  # type: ignore[attr-defined]
    implicit_class = stmt.name in ("__new__", "__init_subclass__", "__class_getitem__")  # type: ignore[attr-defined]
    if positional and not implicit_class and not decorators & {"staticmethod", "classmethod"}:
        names.add(positional[0].arg)
    return names


def instance_attributes(method: ast.stmt) -> set[str]:
    names = set()
    receivers = self_names(method)
    for node in ast.walk(method):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target, _ in assignments(node):
                receiver = target.value if isinstance(target, ast.Attribute) else None
                if isinstance(receiver, ast.Name) and receiver.id in receivers:
                    names.add(target.attr)  # type: ignore[union-attr]
    return names


def class_entry(node: ast.ClassDef) -> dict[str, Any]:
    bases = [ast.unparse(b) for b in node.bases]
    is_enum = any(b.split(".")[-1] in ENUM_BASES for b in bases)
    methods: dict[str, Any] = {}
    properties: set[str] = set()
    attributes: set[str] = set()
    members: set[str] = set()
    on_self: set[str] = set()
    for stmt in statements(node.body):
        if is_function(stmt):
            decorators = decorator_names(stmt)
            last = [d.split(".")[-1] for d in decorators]
            if any(d in PROPERTY_DECORATORS for d in last):
                properties.add(stmt.name)  # type: ignore[attr-defined]
            elif not any(d.endswith((".setter", ".getter", ".deleter")) for d in decorators):
                add_function(methods, stmt)
            on_self |= instance_attributes(stmt)
        elif isinstance(stmt, ast.ClassDef):
            attributes.add(stmt.name)
        else:
            for target, _ in assignments(stmt):
                if isinstance(target, ast.Name):
                    private = target.id.startswith("_")
                    (members if is_enum and not private else attributes).add(target.id)
    entry: dict[str, Any] = {
        "bases": bases,
        "decorators": decorator_names(node),
        "methods": methods,
        "properties": sorted(properties),
        "class_attributes": sorted(attributes),
        "instance_attributes": sorted(on_self),
        "enum_members": sorted(members),
    }
    return {key: value for key, value in entry.items() if value}


def import_entries(stmt: ast.stmt) -> dict[str, str]:
    if isinstance(stmt, ast.Import):
        return {
            (alias.asname or alias.name.split(".")[0]): (alias.name if alias.asname else alias.name.split(".")[0])
            for alias in stmt.names
        }
    if isinstance(stmt, ast.ImportFrom):
        module = "." * stmt.level + (stmt.module or "")
        return {(alias.asname or alias.name): f"{module}.{alias.name}" if module.strip(".") else module + alias.name
                for alias in stmt.names}
    return {}


def dotted(node: ast.expr) -> Optional[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def c_names(tree: ast.Module) -> list[str]:
    """The chains after `torch._C.` the file references (longest chains, no dunders), and the
    names it imports from torch._C (anywhere, type-checking imports included)."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            inner.add(id(node.value))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            chain = dotted(node)
            if chain and chain.startswith("torch._C."):
                rest = [p for p in chain[len("torch._C."):].split(".")]
                while rest and rest[-1].startswith("__"):
                    rest.pop()
                if rest and not rest[0].startswith("__"):
                    found.add(".".join(rest))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "torch._C" or node.module.startswith("torch._C."):
                prefix = node.module[len("torch._C"):].lstrip(".")
                for alias in node.names:
                    found.add(f"{prefix}.{alias.name}" if prefix else alias.name)
    return sorted(found)


def config_options(body: list[ast.stmt], classes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{option: default text} of a config module or class body, as torch's config module reads
    it: assigned names (not dunders); a nested config class is an object of its own options,
    with those of the config classes it inherits from (`class cuda(cutlass)`)."""
    options: dict[str, Any] = {}
    for stmt in statements(body):
        if isinstance(stmt, ast.ClassDef):
            inherited: dict[str, Any] = {}
            for base in stmt.bases:
                inherited.update(classes.get(ast.unparse(base), {}))
            options[stmt.name] = classes[stmt.name] = {**inherited, **config_options(stmt.body, classes)}
        else:
            for target, value in assignments(stmt):
                if isinstance(target, ast.Name) and not target.id.startswith("__") and value is not None:
                    options[target.id] = source_text(value)
    return options


def file_surface(path: str, text: str) -> dict[str, Any]:
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        raise SurfaceError(
            f"{path}: can't parse line {e.lineno} with Python {sys.version.split()[0]} ({e.msg}); "
            "run this script with a newer Python"
        ) from e
    functions: dict[str, Any] = {}
    classes: dict[str, Any] = {}
    assigned: set[str] = set()
    imports: dict[str, str] = {}
    for stmt in statements(tree.body):
        if is_function(stmt):
            add_function(functions, stmt)
        elif isinstance(stmt, ast.ClassDef):
            classes[stmt.name] = class_entry(stmt)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            imports.update(import_entries(stmt))
        else:
            assigned.update(t.id for t, _ in assignments(stmt) if isinstance(t, ast.Name))
    entry: dict[str, Any] = {
        "functions": functions,
        "imports": imports,
        "c_names": c_names(tree),
    }
    if path == CONFIG_FILE:
        entry["config"] = config_options(tree.body, {})
    else:
        entry["classes"] = classes
        entry["assigned"] = sorted(assigned)
    return {key: value for key, value in entry.items() if value}


def surface(sources: dict[str, str], release: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "release": release,
        "files": {path: file_surface(path, sources[path]) for path in sorted(sources)},
    }


# -- writing --------------------------------------------------------------------------------------


def dumps(value: Any, indent: int = 0, column: int = 0) -> str:
    """JSON with sorted keys, indented by two; a list or object is written on one line where it
    fits in LINE_WIDTH columns from `column`, and a longer list of strings fills its lines (which
    keeps the files small and their diffs readable)."""
    flat = json.dumps(value, sort_keys=True)
    if not isinstance(value, (dict, list)) or not value or max(indent, column) + len(flat) <= LINE_WIDTH:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for key in sorted(value):
            head = f"{pad}{json.dumps(key)}: "
            items.append(head + dumps(value[key], indent + 2, len(head)))
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if all(isinstance(v, str) for v in value):
        lines, line = [], ""
        for v in value:
            word = json.dumps(v) + ","
            if line and len(pad) + len(line) + 1 + len(word) > LINE_WIDTH:
                lines.append(line)
                line = ""
            line = f"{line} {word}" if line else word
        lines.append(line[:-1])
        return "[\n" + "\n".join(pad + line for line in lines) + "\n" + " " * indent + "]"
    items = [pad + dumps(v, indent + 2, indent + 2) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def render(data: dict[str, Any]) -> str:
    return dumps(data) + "\n"


def output_path(out: Path, release: str) -> Path:
    target = out / f"{release}.json" if out.is_dir() else out
    if not target.parent.is_dir():
        raise SurfaceError(f"-o {out}: the folder {target.parent} does not exist")
    if target.exists() and not target.is_file():
        raise SurfaceError(f"-o {out}: {target} is not a file")
    return target


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write the surface of a torch release that cgviz relies on (see the module docstring).")
    parser.add_argument("source", type=Path, help="a torch wheel, or a folder holding torch/...")
    parser.add_argument(
        "-o", "--output", type=Path, help="the JSON file, or a folder for <release>.json (default: print)")
    parser.add_argument("--release", help="the release, where the source's name does not say it (2.15.0)")
    parser.add_argument("--check", action="store_true", help="compare with the -o file instead of writing it")
    args = parser.parse_args(argv)
    try:
        sources = read_sources(args.source)
        release = args.release or release_of(args.source)
        if not release:
            raise SurfaceError(
                f"{args.source}: its name says no release (like 2.15.0, torch-2.15.0, "
                "torch-2.15.0-cp312-...whl); give --release")
        text = render(surface(sources, release))
        if args.output is None:
            if args.check:
                raise SurfaceError("--check needs -o, the file to compare with")
            sys.stdout.write(text)
            return 0
        target = output_path(args.output, release)
        if args.check:
            if not target.is_file():
                raise SurfaceError(f"--check: {target} does not exist")
            same = target.read_text(encoding="utf-8") == text
            print(f"{target}: {'up to date' if same else 'differs from what ' + str(args.source) + ' gives'}")
            return 0 if same else 1
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as e:
            raise SurfaceError(f"-o {args.output}: can't write ({e})") from e
        print(f"wrote {target} ({len(text.encode())} bytes, release {release})", file=sys.stderr)
        return 0
    except SurfaceError as e:
        print(f"torch_surface: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
