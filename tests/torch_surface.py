"""The recorded surfaces of torch releases (tests/data/torch_surface/<release>.json), for tests.

scripts/torch_surface.py writes one JSON per release from its sources: the functions, classes
(methods with their signatures, properties, class and instance attributes, enum members),
module-level names, imports, config options and `torch._C` names of five files. Here they are
read back:

    surface = load_surface("2.15.0")
    surface.has_member("CUDAGraphTreeManager", "mark_warmup_incomplete")
    surface.signature("CUDAGraphTreeManager", "run")           # an inspect.Signature
    surface.config_default("triton.cudagraph_unexpected_rerecord_limit")   # "128"
    surface.has("graphs.register_graph_capture_start_hook")    # a name as SINCE spells it

A name is looked up in a file given as its path ("torch/cuda/graphs.py"), its module
("torch.cuda.graphs") or its short name (ALIASES: "graphs"); classes default to
cudagraph_trees.py, and a class that a file imports from another recorded file is followed
there (cudagraph_trees imports WrappedFunction from cudagraph_utils).

Keys, as `has(key)` reads them (the format of _torch_layout.SINCE):

    "Class", "Class.member"            a class of cudagraph_trees.py (its name starts upper-case),
                                       and its method, property, class or instance attribute
    "name"                             a module-level name of cudagraph_trees.py (no dot)
    "<alias>.name", "<alias>.Class.member"
                                       the same in the file ALIASES names: cudagraph_trees,
                                       cudagraph_utils, graphs, compiler
    "config.<option>"                  a config option of torch/_inductor/config.py
    "<option>"                         also a config option: a key listed in `config_options`
                                       (_torch_layout.CONFIG_OPTIONS), or any other dotted key
                                       with a lower-case first part ("triton.cudagraph_trees")

_torch_layout.SINCE maps such a key to the first release that has the name, UNTIL to the last
one; a release there is "2.14" (the 2.14 line: compare_release) or "2.14.1".

`call_like` and `strict_original` help test a wrapper's forwarding against a signature.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

DATA = Path(__file__).parent / "data" / "torch_surface"
TREES = "torch/_inductor/cudagraph_trees.py"
CONFIG = "torch/_inductor/config.py"
ALIASES = {
    "cudagraph_trees": TREES,
    "cudagraph_utils": "torch/_inductor/cudagraph_utils.py",
    "config": CONFIG,
    "graphs": "torch/cuda/graphs.py",
    "compiler": "torch/compiler/__init__.py",
}
LONG = "<long>"  # the script's text for a default too long to record


def release_key(release: str) -> tuple:
    """A sort key of a release: "2.9.1" < "2.10.0" < "2.15.0rc1" < "2.15.0"."""
    match = re.match(r"(\d+(?:\.\d+)*)(.*)", release)
    if not match:
        return ((), 0, release)
    numbers = tuple(int(n) for n in match.group(1).split("."))
    numbers += (0,) * (3 - len(numbers))
    rest = match.group(2)
    return (numbers, 0 if rest else 1, rest)  # a pre-release sorts before its release


def compare_release(release: str, claim: str) -> int:
    """-1, 0 or 1 as `release` is before, in or after the release `claim` names, at the claim's
    precision: "2.14.1" is in "2.14" (0), and after "2.14.0" (1)."""
    given = re.match(r"(\d+(?:\.\d+)*)(.*)", claim)
    n = len(given.group(1).split(".")) if given else 0
    if given is None or given.group(2) or n >= 3:
        a, b = release_key(release), release_key(claim)
    else:
        a, b = release_key(release)[0][:n], release_key(claim)[0][:n]
    return (a > b) - (a < b)


RELEASES: list[str] = sorted((p.stem for p in DATA.glob("*.json")), key=release_key)


def path_of(file: str) -> str:
    """A file's path inside the release, from its path, module or alias."""
    if file in ALIASES:
        return ALIASES[file]
    if file.endswith(".py"):
        return file
    path = file.replace(".", "/")
    return f"{path}.py" if f"{path}.py" in ALIASES.values() else f"{path}/__init__.py"


def module_of(path: str) -> str:
    module = path[: -len(".py")].replace("/", ".")
    return module[: -len(".__init__")] if module.endswith(".__init__") else module


class SourceDefault:
    """A default that is not a literal: its source text ("<long>" where too long to record)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SourceDefault) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def default_value(text: str) -> Any:
    """A literal default as its value (None, False, 0, 'copy', ()), anything else a SourceDefault."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return SourceDefault(text)


def signature_of(entry: list[str]) -> inspect.Signature:
    """The inspect.Signature of a recorded def (its decorators, the "@..." items, left out)."""
    P = inspect.Parameter
    parameters: list[inspect.Parameter] = []
    kind = P.POSITIONAL_OR_KEYWORD
    for item in entry:
        if item.startswith("@"):
            continue
        if item == "/":
            parameters = [p.replace(kind=P.POSITIONAL_ONLY) for p in parameters]
        elif item == "*":
            kind = P.KEYWORD_ONLY
        elif item.startswith("**"):
            parameters.append(P(item[2:], P.VAR_KEYWORD))
        elif item.startswith("*"):
            parameters.append(P(item[1:], P.VAR_POSITIONAL))
            kind = P.KEYWORD_ONLY
        else:
            name, eq, text = item.partition("=")
            parameters.append(P(name, kind, default=default_value(text) if eq else P.empty))
    return inspect.Signature(parameters)


class Surface:
    """One release's recorded surface (see the module docstring)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.release: str = data["release"]
        self.files: dict[str, dict[str, Any]] = data["files"]

    def __repr__(self) -> str:
        return f"Surface({self.release!r})"

    # -- files and module-level names ---------------------------------------------------------

    def file(self, file: str) -> dict[str, Any]:
        """A file's recorded entry ({} where the release has no such file recorded)."""
        return self.files.get(path_of(file), {})

    def has_file(self, file: str) -> bool:
        return path_of(file) in self.files

    def has_function(self, file: str, name: str) -> bool:
        """Does the file define a module-level function `name`?"""
        return name in self.file(file).get("functions", {})

    def has_name(self, file: str, name: str) -> bool:
        """Is `name` bound at the file's module level (function, class, assignment or import)?"""
        entry = self.file(file)
        return any(name in entry.get(key, ()) for key in ("functions", "classes", "assigned", "imports"))

    def imported_from(self, file: str, name: str) -> Optional[str]:
        """Where the file imports `name` from: "torch._inductor.cudagraph_utils.WrappedFunction"."""
        return self.file(file).get("imports", {}).get(name)

    def function_signature(self, file: str, name: str) -> inspect.Signature:
        return signature_of(self.file(file)["functions"][name])

    # -- classes ------------------------------------------------------------------------------

    def find_class(self, name: str, file: str = TREES) -> Optional[tuple[str, dict[str, Any]]]:
        """(path, entry) of the class `name` as `file` sees it, following its imports into the
        other recorded files; None where it has none or imports it from a file not recorded."""
        path = path_of(file)
        for _ in range(len(self.files) + 1):
            entry = self.files.get(path, {})
            if name in entry.get("classes", {}):
                return path, entry["classes"][name]
            source = entry.get("imports", {}).get(name)
            if source is None:
                return None
            module, _, name = resolve_import(source, path).rpartition(".")
            path = path_of(module)
            if path not in self.files:
                return None
        return None

    def has_class(self, name: str, file: str = TREES) -> bool:
        return self.find_class(name, file) is not None

    def members(self, cls: str, file: str = TREES) -> set[str]:
        """Methods, properties, class and instance attributes and enum members of a class, those
        of its bases found in the recorded files included."""
        found = self.find_class(cls, file)
        if found is None:
            return set()
        path, entry = found
        names = set(entry.get("methods", {}))
        for key in ("properties", "class_attributes", "instance_attributes", "enum_members"):
            names.update(entry.get(key, ()))
        for base in entry.get("bases", ()):
            if base.split(".")[-1] != cls:
                names |= self.members(base.split(".")[-1], path)
        return names

    def has_member(self, cls: str, name: str, file: str = TREES) -> bool:
        """Has the class a method, property, class or instance attribute or enum member `name`?"""
        return name in self.members(cls, file)

    def method(self, cls: str, name: str, file: str = TREES) -> list[str]:
        """The recorded def of a method (its own class's, or a recorded base's)."""
        found = self.find_class(cls, file)
        if found is None:
            raise KeyError(f"torch {self.release} has no class {cls} recorded")
        path, entry = found
        if name in entry.get("methods", {}):
            return entry["methods"][name]
        for base in entry.get("bases", ()):
            try:
                return self.method(base.split(".")[-1], name, path)
            except KeyError:
                pass
        raise KeyError(f"torch {self.release} has no method {cls}.{name} recorded")

    def signature(self, cls: str, method: str, file: str = TREES) -> inspect.Signature:
        """A method's signature, `self` included; a default that is not a literal is a
        SourceDefault holding its source text."""
        return signature_of(self.method(cls, method, file))

    def decorators(self, cls: str, method: str, file: str = TREES) -> list[str]:
        return [item[1:] for item in self.method(cls, method, file) if item.startswith("@")]

    # -- config and torch._C ------------------------------------------------------------------

    def _config_entry(self, option: str) -> Any:
        value: Any = self.file(CONFIG).get("config", {})
        for part in option.split("."):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        return value

    def has_config(self, option: str) -> bool:
        """Has torch._inductor.config this option ("triton.cudagraph_trees", "debug")?"""
        return isinstance(self._config_entry(option), str)

    def config_default(self, option: str) -> str:
        """The source text of an option's default ("128", "None", "<long>")."""
        value = self._config_entry(option)
        if not isinstance(value, str):
            raise KeyError(f"torch {self.release} has no config option {option}")
        return value

    def c_names_of(self, file: str) -> set[str]:
        return set(self.file(file).get("c_names", ()))

    @property
    def c_names(self) -> set[str]:
        """The names after `torch._C.` that the recorded files reference."""
        return {name for entry in self.files.values() for name in entry.get("c_names", ())}

    # -- keys ---------------------------------------------------------------------------------

    def has(self, key: str, config_options: Iterable[str] = ()) -> Optional[bool]:
        """Is the name `key` (format in the module docstring) in this release? None where it
        lives in a file that is not recorded (a class imported from elsewhere), so that the
        release can't say."""
        kind, file, name = parse_key(key, config_options)
        if kind == "config":
            return self.has_config(name)
        cls, dot, member = name.partition(".")
        if not dot:
            return self.has_name(file, name)
        if self.find_class(cls, file) is not None:
            return True if self.has_member(cls, member, file) else self._unseen_base(cls, file)
        source = self.imported_from(file, cls)
        if source is not None and path_of(resolve_import(source, path_of(file)).rpartition(".")[0]) not in self.files:
            return None
        return False

    def _unseen_base(self, cls: str, file: str = TREES) -> Optional[bool]:
        """None where the class (or a recorded base) derives from a torch class whose file is
        not recorded (torch.cuda.graphs.CUDAGraph from torch._C._CUDAGraph), else False."""
        found = self.find_class(cls, file)
        if found is None:
            return False
        path, entry = found
        for base in entry.get("bases", ()):
            name = base.split(".")[-1]
            if name == cls:
                continue
            if self.find_class(name, path) is not None:
                if self._unseen_base(name, path) is None:
                    return None
                continue
            source = self.imported_from(path, base.split(".")[0])
            origin = resolve_import(source, path) if source else base
            if origin.startswith("torch."):
                return None
        return False


def resolve_import(source: str, path: str) -> str:
    """An import's absolute "module.name", for a relative one (".cudagraph_utils.X") too."""
    if not source.startswith("."):
        return source
    dots = len(source) - len(source.lstrip("."))
    package = module_of(path).split(".")
    package = package if path.endswith("__init__.py") else package[:-1]
    base = package[: len(package) - (dots - 1)]
    return ".".join([*base, source[dots:]])


def parse_key(key: str, config_options: Iterable[str] = ()) -> tuple[str, str, str]:
    """("config", CONFIG, option) or ("name", path, "name" or "Class.member") for a key."""
    first, dot, rest = key.partition(".")
    if first == "config" and dot:
        return "config", CONFIG, rest
    if key in set(config_options):
        return "config", CONFIG, key
    if first in ALIASES and dot:
        return "name", ALIASES[first], rest
    if dot and not first[:1].isupper():
        return "config", CONFIG, key
    return "name", TREES, key


@functools.lru_cache(maxsize=None)
def _load(release: str) -> Surface:
    path = DATA / f"{release}.json"
    if not path.is_file():
        raise KeyError(f"no surface recorded for torch {release} (have: {', '.join(RELEASES)})")
    return Surface(json.loads(path.read_text(encoding="utf-8")))


def load_surface(release: str) -> Surface:
    """The recorded surface of a release (one of RELEASES)."""
    return _load(release)


# -- calling like torch does ----------------------------------------------------------------------


class Arg:
    """A distinct value passed for a parameter (compares by identity; shows its parameter)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<arg {self.name}>"


_NO_SELF = object()


def other_value(parameter: inspect.Parameter) -> Any:
    """A value unlike the parameter's default: True for False, 129 for 128, 'copy_' for 'copy',
    an Arg for None and everything else (and where there is no default)."""
    default = parameter.default
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1
    if isinstance(default, str):
        return default + "_"
    return Arg(parameter.name)


def call_like(signature: inspect.Signature, self_obj: Any = _NO_SELF) -> tuple[tuple, dict]:
    """(args, kwargs) for a call the way torch's own callers could make it, with every parameter
    given a value unlike its default (`other_value`): the required ones positionally, the
    optional ones by keyword (positionally where *args follows, and then one more for *args),
    every keyword-only one, and one extra keyword for **kwargs. `self_obj`, where given, is
    the first positional argument (`self` of a method called on its class)."""
    P = inspect.Parameter
    params = list(signature.parameters.values())
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    takes_varargs = any(p.kind == P.VAR_POSITIONAL for p in params)
    for i, p in enumerate(params):
        if i == 0 and self_obj is not _NO_SELF and p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
            args.append(self_obj)
            self_obj = _NO_SELF
        elif p.kind == P.POSITIONAL_ONLY or (
            p.kind == P.POSITIONAL_OR_KEYWORD and (p.default is P.empty or takes_varargs)
        ):
            args.append(other_value(p))
        elif p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY):
            kwargs[p.name] = other_value(p)
        elif p.kind == P.VAR_POSITIONAL:
            if self_obj is not _NO_SELF:  # (*args, **kwargs): the instance comes first all the same
                args.append(self_obj)
                self_obj = _NO_SELF
            args.append(Arg(f"*{p.name}"))
        elif p.kind == P.VAR_KEYWORD:
            extra = f"{p.name}_extra"
            while extra in signature.parameters:
                extra += "_"
            kwargs[extra] = Arg(f"**{p.name}")
    return tuple(args), kwargs


def strict_original(
    signature: inspect.Signature, result: Any = None, name: str = "original"
) -> Callable[..., Any]:
    """A stand-in for a torch method with this signature: it binds its arguments with
    `signature.bind` (a TypeError where a wrapper passed them wrong), appends the
    inspect.BoundArguments to its `calls` list, and returns `result`."""
    calls: list[inspect.BoundArguments] = []

    def original(*args: Any, **kwargs: Any) -> Any:
        calls.append(signature.bind(*args, **kwargs))
        return result

    original.calls = calls  # type: ignore[attr-defined]
    original.__signature__ = signature  # type: ignore[attr-defined]
    original.__name__ = original.__qualname__ = name
    return original
