"""cgviz's private torch names against the recorded surface of every torch release.

scripts/torch_surface.py writes tests/data/torch_surface/<release>.json from a release's
sources; tests/torch_surface.py reads them. Here: the script reproduces the recorded files
(where the sources are at hand: ../shared/torch-src/<release> beside the checkout, or CGVIZ_TORCH_SRC), its errors, and every name
that cgviz/observe/_torch_layout/ and cgviz/engine/_torch_compat.py declare, in every
recorded release. A name that torch added in some release is listed in _torch_layout.SINCE
({key: first release}, keys as tests/torch_surface.py describes), one it removed in UNTIL
({key: last release}); such a claim is checked both ways: absent before (after) that release,
present from (until) it. Every other name must be in every recorded release.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cgviz.engine import _torch_compat as compat
from cgviz.observe import _torch_layout as layout
from cgviz.observe.releases import release as release_of
from helpers import ROOT
from torch_surface import (
    ALIASES,
    CONFIG,
    DATA,
    RELEASES,
    TREES,
    Arg,
    SourceDefault,
    Surface,
    call_like,
    compare_release,
    load_surface,
    parse_key,
    release_key,
    signature_of,
    strict_original,
)

SCRIPT = ROOT / "scripts" / "torch_surface.py"
# torch's sources by release, where at hand (CI has none: there the recorded JSON is what is checked)
TORCH_SRC = Path(os.environ.get("CGVIZ_TORCH_SRC", ROOT.parent / "shared" / "torch-src"))


def load_script():
    spec = importlib.util.spec_from_file_location("torch_surface_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = load_script()


def run_script(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, cwd=cwd)


# -- the recorded files ---------------------------------------------------------------------------


def test_releases_are_recorded():
    assert RELEASES, f"no surfaces in {DATA}"
    assert RELEASES == sorted(RELEASES, key=release_key)
    assert release_key("2.9.1") < release_key("2.10.0") < release_key("2.15.0rc1") < release_key("2.15.0")
    assert compare_release("2.14.1", "2.14") == 0 and compare_release("2.14.1", "2.14.0") == 1
    assert compare_release("2.13.0", "2.14") == -1 and compare_release("2.15.0", "2.14") == 1
    assert compare_release("2.15.0rc1", "2.15.0") == -1 and compare_release("2.15.0rc1", "2.15") == 0


@pytest.mark.parametrize("release", RELEASES)
def test_recorded_file_is_what_the_script_writes(release):
    """Well-formed, canonical (as the script renders it), small, with no paths of this machine."""
    text = (DATA / f"{release}.json").read_text(encoding="utf-8")
    data = json.loads(text)
    assert data["release"] == release
    assert data["format"] == script.FORMAT
    assert TREES in data["files"] and set(data["files"]) <= set(script.FILES)
    assert script.render(data) == text
    assert len(text.encode()) < 100_000
    assert str(ROOT.parent) not in text and "torch-src" not in text


@pytest.mark.parametrize("release", RELEASES)
def test_script_reproduces_the_recorded_file(release):
    folder = TORCH_SRC / release
    if not (folder / TREES).is_file():
        pytest.skip(f"no sources of torch {release} at {folder}")
    made = script.render(script.surface(script.read_sources(folder), release))
    assert made == (DATA / f"{release}.json").read_text(encoding="utf-8"), (
        f"tests/data/torch_surface/{release}.json is not what the script makes: "
        f"python scripts/torch_surface.py {folder} -o tests/data/torch_surface/"
    )


def test_check_mode_on_a_release_folder(tmp_path):
    release = RELEASES[-1]
    folder = TORCH_SRC / release
    if not (folder / TREES).is_file():
        pytest.skip(f"no sources of torch {release} at {folder}")
    done = run_script(folder, "-o", DATA, "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "up to date" in done.stdout


def test_a_wheel_of_the_real_files_gives_the_recorded_surface(tmp_path):
    release = RELEASES[-1]
    folder = TORCH_SRC / release
    if not (folder / TREES).is_file():
        pytest.skip(f"no sources of torch {release} at {folder}")
    wheel = tmp_path / f"torch-{release}+cu128-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name in script.FILES:
            z.write(folder / name, name)
        z.writestr("torch/__init__.py", "raise RuntimeError('never run')\n")
    done = run_script(wheel, "-o", tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / f"{release}.json").read_text() == (DATA / f"{release}.json").read_text()


# -- the script on small made-up sources ----------------------------------------------------------

FAKE_TREES = '''
from __future__ import annotations

import enum
from enum import Enum, auto
from typing import TYPE_CHECKING, overload

import torch
from torch._C import _cuda_releasePool as release_pool
from torch._dynamo.mutation_guard import GenerationTracker
from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter, WrappedFunction
from .cudagraph_utils import FunctionID

if TYPE_CHECKING:
    from torch._guards import CompileId
    hidden = 1

if torch.backends.cuda.is_built():
    from torch._C import _set_cached_tensors_enabled
else:
    def _set_cached_tensors_enabled(enabled):
        pass

LIMIT: int = 3
a, (b, *c) = 1, (2, 3)


class ExecutionState(Enum):
    NONE = auto()
    WARMUP = auto()
    _ignore_ = []


class Node:
    kind = "node"
    count: int

    def __init__(self, parent, *, device_index: int = 0):
        self.parent = parent
        self.children: dict = {}
        self.a, self.b = 1, 2
        self.total += 1
        other.x = 1

        def inner():
            self.nested = 1

    @property
    def depth(self):
        return 0

    @depth.setter
    def depth(self, value):
        self._depth = value

    @staticmethod
    def make(x, /, y=None, *args, z, w=(1, 2), **kw):
        return torch._C._cuda_getCheckpointState(x)

    @classmethod
    def build(cls, q="copy"):
        cls.made = True

    def long(self, x=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]):
        return torch._C.__dict__


class Manager(Node):
    def run(self, new_inputs, function_id, *, limit=128, ratio=1.5, flag=False):
        torch._C._cuda_releasePool.__doc__
        torch._C._dynamo.eval_frame.hook()


@overload
def f(x: int) -> int: ...
@overload
def f(x: str) -> str: ...
def f(x, flag=False):
    return x
'''

FAKE_UTILS = '''
import dataclasses
from enum import Enum


@dataclasses.dataclass(frozen=True)
class FunctionID:
    id: int


@dataclasses.dataclass
class WrappedFunction:
    model: object
    id: FunctionID


class CheckInvariantStatus(Enum):
    SUCCESS = 1
    StaticInputIdxMismatch = 2


def log_cudagraph_skip_and_bump_counter(msg):
    pass
'''

FAKE_CONFIG = '''
import os
from typing import TYPE_CHECKING

debug = False
verbose: bool = os.environ.get("TORCHINDUCTOR_VERBOSE_FOR_A_LONG_NAME", "0") == "1"
_private = 1
__dunder__ = 2
if TYPE_CHECKING:
    hidden = 1


class cutlass:
    enable = True


class cuda(cutlass):
    arch = None


class triton:
    cudagraph_trees = True
    cudagraph_unexpected_rerecord_limit = 128

    class inner:
        deep = "x"


def helper() -> bool:
    return True
'''

FAKE_GRAPHS = '''
from torch._C import _CUDAGraph


class CUDAGraph(_CUDAGraph):
    def capture_begin(self, pool=None, capture_error_mode="global"):
        pass


def register_graph_capture_start_hook(hook):
    pass
'''

FAKE_COMPILER = '''
def cudagraph_mark_step_begin():
    from torch._inductor import cudagraph_trees
'''

FAKE = {
    TREES: FAKE_TREES,
    ALIASES["cudagraph_utils"]: FAKE_UTILS,
    CONFIG: FAKE_CONFIG,
    ALIASES["graphs"]: FAKE_GRAPHS,
    ALIASES["compiler"]: FAKE_COMPILER,
}


def fake_release(folder: Path, files=FAKE) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def fake_wheel(path: Path, files=FAKE, compression=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


@pytest.fixture
def fake(tmp_path) -> Surface:
    folder = fake_release(tmp_path / "2.99.0")
    done = run_script(folder, "-o", tmp_path)
    assert done.returncode == 0, done.stderr
    return Surface(json.loads((tmp_path / "2.99.0.json").read_text()))


def test_script_records_functions_and_signatures(fake):
    trees = fake.file(TREES)
    assert trees["functions"]["f"] == ["x", "flag=False"]  # the implementation, not an @overload
    node = trees["classes"]["Node"]
    assert node["methods"]["make"] == ["@staticmethod", "x", "/", "y=None", "*args", "z", "w=(1, 2)", "**kw"]
    assert node["methods"]["build"] == ["@classmethod", "cls", "q='copy'"]
    assert node["methods"]["long"] == ["self", "x=<long>"]
    assert node["methods"]["__init__"] == ["self", "parent", "*", "device_index=0"]

    P = inspect.Parameter
    sig = fake.signature("Node", "make")
    assert [(p.name, p.kind) for p in sig.parameters.values()] == [
        ("x", P.POSITIONAL_ONLY), ("y", P.POSITIONAL_OR_KEYWORD), ("args", P.VAR_POSITIONAL),
        ("z", P.KEYWORD_ONLY), ("w", P.KEYWORD_ONLY), ("kw", P.VAR_KEYWORD),
    ]
    assert sig.parameters["w"].default == (1, 2) and sig.parameters["z"].default is P.empty
    assert fake.decorators("Node", "make") == ["staticmethod"]
    assert fake.signature("Node", "long").parameters["x"].default == SourceDefault("<long>")
    assert fake.signature("Manager", "make") == sig  # inherited from a recorded base

    # the rebuilt signature is Python's own for the same def
    namespace: dict = {}
    exec("def make(x, /, y=None, *args, z, w=(1, 2), **kw): pass", namespace)
    assert str(inspect.signature(namespace["make"])) == str(sig)


def test_script_records_class_members(fake):
    node = fake.file(TREES)["classes"]["Node"]
    assert node["properties"] == ["depth"]
    assert node["class_attributes"] == ["count", "kind"]
    assert node["instance_attributes"] == ["_depth", "a", "b", "children", "nested", "parent", "total"]
    assert "made" not in node["instance_attributes"]  # cls.made in a classmethod is not on instances
    assert fake.file(TREES)["classes"]["ExecutionState"]["enum_members"] == ["NONE", "WARMUP"]
    assert fake.file(TREES)["classes"]["ExecutionState"]["class_attributes"] == ["_ignore_"]
    assert fake.has_member("Manager", "children") and fake.has_member("Manager", "run")
    assert not fake.has_member("Node", "run")
    assert fake.has_member("CheckInvariantStatus", "SUCCESS", "cudagraph_utils")
    # a class imported from another recorded file is followed there
    assert fake.find_class("WrappedFunction")[0] == ALIASES["cudagraph_utils"]
    assert fake.has_member("WrappedFunction", "id") and fake.has_member("FunctionID", "id")  # relative import


def test_script_records_module_names_imports_and_c_names(fake):
    trees = fake.file(TREES)
    assert trees["assigned"] == ["LIMIT", "a", "b", "c"]  # not `hidden`, under TYPE_CHECKING
    assert "CompileId" not in trees["imports"]
    assert trees["imports"]["release_pool"] == "torch._C._cuda_releasePool"
    assert trees["imports"]["FunctionID"] == ".cudagraph_utils.FunctionID"
    assert trees["imports"]["enum"] == "enum"
    assert "_set_cached_tensors_enabled" in trees["functions"]  # the else branch's def
    assert trees["c_names"] == [
        "_cuda_getCheckpointState", "_cuda_releasePool", "_dynamo.eval_frame.hook", "_set_cached_tensors_enabled",
    ]
    assert fake.c_names == {*trees["c_names"], "_CUDAGraph"}
    assert fake.has_function("cudagraph_utils", "log_cudagraph_skip_and_bump_counter")
    assert fake.has_name("cudagraph_trees", "log_cudagraph_skip_and_bump_counter")  # imported by name
    assert not fake.has_function("cudagraph_trees", "log_cudagraph_skip_and_bump_counter")
    assert fake.has_function("torch.compiler", "cudagraph_mark_step_begin")


def test_script_records_config(fake):
    assert fake.file(CONFIG)["config"] == {
        "_private": "1",
        "cuda": {"arch": "None", "enable": "True"},  # with its base's options
        "cutlass": {"enable": "True"},
        "debug": "False",
        "triton": {"cudagraph_trees": "True", "cudagraph_unexpected_rerecord_limit": "128", "inner": {"deep": "'x'"}},
        "verbose": "<long>",
    }
    assert fake.has_config("triton.cudagraph_trees") and fake.has_config("debug")
    assert fake.has_config("triton.inner.deep") and not fake.has_config("triton.inner")
    assert not fake.has_config("triton.nothing") and not fake.has_config("hidden")
    assert fake.config_default("triton.cudagraph_unexpected_rerecord_limit") == "128"
    with pytest.raises(KeyError):
        fake.config_default("triton")
    assert fake.file(CONFIG)["functions"] == {"helper": []}
    assert "classes" not in fake.file(CONFIG)


def test_keys(fake):
    assert parse_key("CUDAGraphTreeManager.run") == ("name", TREES, "CUDAGraphTreeManager.run")
    assert parse_key("mark_step_begin") == ("name", TREES, "mark_step_begin")
    assert parse_key("graphs.register_graph_capture_start_hook") == (
        "name", ALIASES["graphs"], "register_graph_capture_start_hook")
    assert parse_key("triton.cudagraph_trees") == ("config", CONFIG, "triton.cudagraph_trees")
    assert parse_key("config.debug") == ("config", CONFIG, "debug")
    assert parse_key("debug", config_options=("debug",)) == ("config", CONFIG, "debug")
    assert fake.has("Node.children") and fake.has("Manager.depth") and not fake.has("Node.nothing")
    assert fake.has("graphs.register_graph_capture_start_hook") and fake.has("graphs.CUDAGraph.capture_begin")
    assert fake.has("cudagraph_utils.WrappedFunction.model") and fake.has("LIMIT")
    assert fake.has("triton.cudagraph_trees") and fake.has("config.debug") and not fake.has("triton.nothing")
    # what lives in a file that is not recorded can't be told
    assert fake.has("GenerationTracker") is True
    assert fake.has("GenerationTracker.generation") is None
    assert fake.has("graphs.CUDAGraph.replay") is None  # CUDAGraph derives from torch._C._CUDAGraph
    assert fake.has("Nothing.x") is False


def test_a_wheel_gives_what_the_folder_gives(tmp_path):
    folder = fake_release(tmp_path / "2.99.0")
    wheel = fake_wheel(tmp_path / "torch-2.99.0+cpu-cp311-cp311-linux_x86_64.whl")
    out = tmp_path / "out"
    out.mkdir()
    assert run_script(wheel, "-o", out / "from_wheel.json").returncode == 0
    assert run_script(folder, "-o", out / "from_folder.json").returncode == 0
    from_wheel = json.loads((out / "from_wheel.json").read_text())
    assert from_wheel["release"] == "2.99.0"
    assert (out / "from_wheel.json").read_text() == (out / "from_folder.json").read_text()


def test_release_from_names_and_option(tmp_path):
    assert script.release_of(Path("2.15.0")) == "2.15.0"
    assert script.release_of(Path("torch-2.16.0rc1")) == "2.16.0rc1"
    assert script.release_of(Path("torch-2.15.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl")) == "2.15.0"
    assert script.release_of(Path("torch-2.17.0.dev20260101-cp312-none-any.whl")) == "2.17.0.dev20260101"
    assert script.release_of(Path("site-packages")) is None
    folder = fake_release(tmp_path / "site-packages")
    done = run_script(folder)
    assert done.returncode == 2 and "--release" in done.stderr
    done = run_script(folder, "--release", "2.99.1")
    assert done.returncode == 0 and json.loads(done.stdout)["release"] == "2.99.1"


def test_check_mode(tmp_path):
    folder = fake_release(tmp_path / "2.99.0")
    assert run_script(folder, "-o", tmp_path).returncode == 0
    assert run_script(folder, "-o", tmp_path, "--check").returncode == 0
    (folder / TREES).write_text(FAKE_TREES + "\ndef added():\n    pass\n")
    done = run_script(folder, "-o", tmp_path / "2.99.0.json", "--check")
    assert done.returncode == 1 and "differs" in done.stdout
    assert "added" not in (tmp_path / "2.99.0.json").read_text()  # --check writes nothing


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing path", "no such file or folder"),
        ("folder without the files", "has no torch/_inductor/cudagraph_trees.py"),
        ("not a zip", "not a torch wheel"),
        ("corrupt member", "corrupt wheel"),
        ("wheel without the files", "has no torch/_inductor/cudagraph_trees.py"),
        ("output folder missing", "does not exist"),
        ("check without output", "--check needs -o"),
        ("unparsable source", "can't parse line"),
    ],
)
def test_script_errors(tmp_path, case, message):
    args: list = []
    if case == "missing path":
        args = [tmp_path / "2.99.0"]
    elif case == "folder without the files":
        (tmp_path / "2.99.0" / "torch").mkdir(parents=True)
        args = [tmp_path / "2.99.0"]
    elif case == "not a zip":
        (tmp_path / "torch-2.99.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 this is no zip file")
        args = [tmp_path / "torch-2.99.0-py3-none-any.whl"]
    elif case == "corrupt member":
        wheel = fake_wheel(tmp_path / "torch-2.99.0-py3-none-any.whl", compression=zipfile.ZIP_STORED)
        data = bytearray(wheel.read_bytes())
        start = data.index(b"class Node")
        data[start: start + 10] = b"class Edge"  # the stored text changed: its CRC fails
        wheel.write_bytes(bytes(data))
        with zipfile.ZipFile(wheel) as z:  # still a readable zip
            assert TREES in z.namelist()
        args = [wheel]
    elif case == "wheel without the files":
        args = [fake_wheel(tmp_path / "torch-2.99.0-py3-none-any.whl", {"torch/__init__.py": ""})]
    elif case == "output folder missing":
        args = [fake_release(tmp_path / "2.99.0"), "-o", tmp_path / "nowhere" / "2.99.0.json"]
    elif case == "check without output":
        args = [fake_release(tmp_path / "2.99.0"), "--check"]
    elif case == "unparsable source":
        args = [fake_release(tmp_path / "2.99.0", {**FAKE, TREES: "def broken(:\n"})]
    done = run_script(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


# -- cgviz's declared names, in every recorded release ---------------------------------------------

SINCE: dict = getattr(layout, "SINCE", {})
UNTIL: dict = getattr(layout, "UNTIL", {})
CONFIG_OPTIONS: tuple = tuple(getattr(layout, "CONFIG_OPTIONS", ()))
RECORDED_MODULES = {  # module -> its key prefix (the other SKIP_LOGGER_MODULES are not recorded)
    "torch._inductor.cudagraph_trees": "cudagraph_trees",
    "torch._inductor.cudagraph_utils": "cudagraph_utils",
}


def alternatives(entry) -> tuple:
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def config_names() -> tuple:
    return tuple(name for entry in CONFIG_OPTIONS for name in alternatives(entry))


def declared() -> list[tuple[str, ...]]:
    """Each name _torch_layout declares, as a tuple of keys (alternatives: one is enough).
    COMPILED_GRAPH_*, SKIP_COUNTER and COMPILE_CONTEXT live in files that are not recorded."""
    manager = layout.MANAGER_CLASS
    entries = [(manager,), tuple(f"{manager}.{m}" for m in alternatives(layout.RUN_METHODS))]
    entries += [(f"{manager}.{m}",) for m in layout.HOOKED_METHODS.values()]
    for cls, members in layout.CLASS_MEMBERS.items():
        entries.append((cls,))
        entries += [tuple(f"{cls}.{m}" for m in alternatives(e)) for e in members]
    entries.append((layout.WARMUP_NODE_CLASS,))
    entries += [
        (f"{RECORDED_MODULES[m]}.{layout.SKIP_LOGGER}",) for m in layout.SKIP_LOGGER_MODULES if m in RECORDED_MODULES
    ]
    entries += [alternatives(e) for e in CONFIG_OPTIONS]
    return list(dict.fromkeys(entries))


DECLARED = declared()


def test_the_trees_module_is_recorded():
    assert layout.TREES_MODULE == "torch._inductor.cudagraph_trees"
    for release in RELEASES:
        assert load_surface(release).has_file(layout.TREES_MODULE)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("entry", DECLARED, ids=["|".join(e) for e in DECLARED])
def test_declared_name_exists(release, entry):
    """A declared name (one of its alternatives) is in the release, unless each alternative
    is claimed in SINCE / UNTIL to be absent from it (the claims are checked by
    test_release_claim)."""
    surface = load_surface(release)
    states = {key: surface.has(key, config_names()) for key in entry}
    if any(states.values()) or all(key in CLAIMED and not claimed_present(key, release) for key in entry):
        return
    if None in states.values():
        pytest.skip(f"{' / '.join(entry)}: lives in a file not recorded (can't tell)")
    pytest.fail(
        f"torch {release} has no {' / '.join(entry)} (and neither SINCE nor UNTIL says it is absent there): "
        "cgviz/observe/_torch_layout.py needs updating (an alternative, SINCE or UNTIL)"
    )


CLAIMED = sorted({*SINCE, *UNTIL})
CLAIM_CASES = [(key, release) for key in CLAIMED for release in RELEASES]


def claimed_present(key: str, release: str) -> bool:
    """Whether SINCE / UNTIL say the release has the name."""
    return (key not in SINCE or compare_release(release, SINCE[key]) >= 0) and (
        key not in UNTIL or compare_release(release, UNTIL[key]) <= 0)


@pytest.mark.parametrize("key, release", CLAIM_CASES, ids=[f"{k}@{r}" for k, r in CLAIM_CASES])
def test_release_claim(key, release):
    """SINCE[key] is the first release that has it, UNTIL[key] the last: the name is absent
    before and after, present in between."""
    state = load_surface(release).has(key, config_names())
    if state is None:
        pytest.skip(f"{key}: lives in a file not recorded (can't tell)")
    expected = claimed_present(key, release)
    claim = " and ".join(
        f"{word} {table[key]}" for word, table in (("from", SINCE), ("until", UNTIL)) if key in table)
    assert state == expected, (
        f"_torch_layout says {key} is in torch {claim}, but torch {release} "
        f"{'lacks' if expected else 'has'} it"
    )


def test_release_claims_are_well_formed():
    for key, release in [*SINCE.items(), *UNTIL.items()]:
        assert isinstance(key, str) and key and isinstance(release, str)
        assert release_key(release)[0], f"{key!r}: {release!r} is not a release"
        parse_key(key, config_names())
    for key in set(SINCE) & set(UNTIL):
        assert compare_release(UNTIL[key], SINCE[key]) >= 0, f"{key}: UNTIL before SINCE"


# -- the private CUDA functions of the engine ------------------------------------------------------



@pytest.mark.parametrize("need", sorted(compat.CUDA_NAMES))
def test_cuda_names_are_referenced_by_torch(need):
    """torch's own Python references one of the alternatives in every release from the first
    one that references any (evidence that torch._C has it; a release that stopped has most
    likely renamed it). A need no recorded file references is reported, not failed."""
    names = set(compat.CUDA_NAMES[need])
    referenced = [r for r in RELEASES if names & load_surface(r).c_names]
    if not referenced:
        pytest.skip(f"{need}: no recorded torch file references {sorted(names)} (not checked)")
    lost = [r for r in RELEASES if release_key(r) > release_key(referenced[0]) and r not in referenced]
    assert not lost, (
        f"{need}: torch {referenced[0]} references {sorted(names & load_surface(referenced[0]).c_names)}, "
        f"torch {', '.join(lost)} none of {sorted(names)}: a new name for CUDA_NAMES?"
    )


@pytest.mark.parametrize("release", RELEASES)
def test_the_liveness_count_is_what_expired_counts(release):
    """The observer reads outputs' liveness by the count StorageWeakRefWrapper.expired() reads."""
    assert layout.STORAGE_USE_COUNT in load_surface(release).c_names_of(TREES)


def cpp_held_check(source: str) -> ast.expr:
    """In check_refcount (the extra check of a cached output): what it returns when C++ holds
    the tensor too, the body of `if ...._use_count() > 1:`."""
    check = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "check_refcount")
    for node in ast.walk(check):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Call)
                and getattr(node.test.left.func, "attr", None) == "_use_count"):
            return next(n.value for n in node.body if isinstance(n, ast.Return))
    raise AssertionError("check_refcount has no `_use_count() > 1` branch")


@pytest.mark.parametrize("release", RELEASES)
def test_a_cached_output_cpp_holds_is_read_as_the_releases_check_refcount_says(release):
    """CPP_HELD_CACHED_OUTPUT_LIVE, per release, against check_refcount's source: live (`return
    False`, not expired) from 2.15; through 2.14, expired when one Python reference is beyond the
    cache's (`return refcount == 3`)."""
    folder = TORCH_SRC / release
    if not (folder / TREES).is_file():
        pytest.skip(f"no sources of torch {release} at {folder}")
    returned = cpp_held_check((folder / TREES).read_text(encoding="utf-8"))
    live = isinstance(returned, ast.Constant) and returned.value is False
    assert live or ast.unparse(returned) == "refcount == 3"
    since = release_of(release)[:2] >= layout.CPP_HELD_CACHED_OUTPUT_LIVE_SINCE
    assert live == since, f"torch {release}: check_refcount returns {ast.unparse(returned)}"


def replays_and_checks(source: str) -> tuple[list[str], set[str]]:
    """In the trees' source: the test of the `if` right around each call of execute_node, and the
    lists that CUDAGraphNode's check_invariants and run hand to _check_liveness."""
    tree = ast.parse(source)
    guards = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            calls = [getattr(stmt, "value", None) for stmt in node.body]  # the if's own statements
            if any(isinstance(c, ast.Call) and getattr(c.func, "attr", None) == "execute_node" for c in calls):
                guards.append(ast.unparse(node.test))
    node_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CUDAGraphNode")
    checked = set()
    for method in node_class.body:
        if isinstance(method, ast.FunctionDef) and method.name in ("check_invariants", "run"):
            for call in ast.walk(method):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "_check_liveness":
                    checked.add(getattr(call.args[0], "attr", ""))
    return guards, checked


@pytest.mark.parametrize("release", RELEASES)
def test_torch_replays_a_node_only_after_finding_its_checked_outputs_dead(release):
    """The observer takes the outputs of CHECKED_DEAD as dead after a replay without asking:
    torch calls execute_node only where the node's check_invariants passed, and the check (or,
    in 2.15, the node's run) finds each output of both lists dead."""
    folder = TORCH_SRC / release
    if not (folder / TREES).is_file():
        pytest.skip(f"no sources of torch {release} at {folder}")
    source = (folder / TREES).read_text(encoding="utf-8")
    guards, checked = replays_and_checks(source)
    assert guards == ["status == CheckInvariantStatus.SUCCESS"], guards
    assert source.count("execute_node(") == 2  # that call, and the method itself
    assert checked == set(layout.CHECKED_DEAD)


# -- the helpers for wrapper tests ----------------------------------------------------------------


def test_call_like_gives_every_parameter_a_value_unlike_its_default():
    def method(self, inputs, function_id, /, pos=3, *, limit=128, ratio=1.5, flag=False, mode="copy",
               hook=None, required):
        pass

    sig = inspect.signature(method)
    me = object()
    args, kwargs = call_like(sig, me)
    assert args[0] is me and len(args) == 3 and all(isinstance(a, Arg) for a in args[1:])
    assert kwargs["pos"] == 4 and kwargs["limit"] == 129 and kwargs["ratio"] == 2.5
    assert kwargs["flag"] is True and kwargs["mode"] == "copy_" and isinstance(kwargs["hook"], Arg)
    assert isinstance(kwargs["required"], Arg)
    original = strict_original(sig, result="out")
    assert original(*args, **kwargs) == "out"
    bound = original.calls[0].arguments
    assert bound["self"] is me and bound["limit"] == 129 and bound["required"] is kwargs["required"]


def test_call_like_with_varargs_and_kwargs():
    def fn(a, b=1, *rest, c, **extra):
        pass

    sig = inspect.signature(fn)
    args, kwargs = call_like(sig)
    assert len(args) == 3 and args[1] == 2 and args[2].name == "*rest"  # b positional, since *rest follows
    assert set(kwargs) == {"c", "extra_extra"}
    original = strict_original(sig)
    original(*args, **kwargs)
    assert original.calls[0].arguments["rest"] == (args[2],)
    assert original.calls[0].arguments["extra"] == {"extra_extra": kwargs["extra_extra"]}

    def wrapper(*args, **kwargs):
        pass

    args, kwargs = call_like(inspect.signature(wrapper), "me")
    assert args[0] == "me" and args[1].name == "*args" and set(kwargs) == {"kwargs_extra"}


def test_strict_original_catches_a_wrapper_that_passes_arguments_wrong():
    sig = signature_of(["self", "new_inputs", "*", "clone=False", "dealloc=False"])
    args, kwargs = call_like(sig, "manager")
    original = strict_original(sig, name="clear_current_path_state_and_set_to_none")
    assert original.__name__ == "clear_current_path_state_and_set_to_none"
    assert inspect.signature(original) == sig

    def good(*a, **k):
        return original(*a, **k)

    def drops_keywords(*a, **k):
        return original(*a)

    def keywords_as_positionals(*a, **k):
        return original(*a, *k.values())

    good(*args, **kwargs)
    assert original.calls[-1].arguments["clone"] is True
    drops_keywords(*args, **kwargs)  # binds (they have defaults) ...
    assert original.calls[-1].arguments.get("clone", False) is False  # ... but the value is lost
    with pytest.raises(TypeError):
        keywords_as_positionals(*args, **kwargs)
    with pytest.raises(TypeError):
        original("manager")  # new_inputs missing
    with pytest.raises(TypeError):
        original("manager", [], nothing=1)


@pytest.mark.parametrize("release", RELEASES)
def test_every_recorded_manager_method_can_be_called_like_torch(release):
    """call_like and strict_original agree on every recorded method of the manager."""
    surface = load_surface(release)
    manager = object()
    for name in sorted(surface.file(TREES)["classes"]["CUDAGraphTreeManager"]["methods"]):
        sig = surface.signature("CUDAGraphTreeManager", name)
        static = "staticmethod" in surface.decorators("CUDAGraphTreeManager", name)
        args, kwargs = call_like(sig) if static else call_like(sig, manager)
        original = strict_original(sig)
        original(*args, **kwargs)
        keyword_only = [p.name for p in sig.parameters.values() if p.kind == p.KEYWORD_ONLY]
        assert all(original.calls[0].arguments[k] != sig.parameters[k].default for k in keyword_only)


def test_load_surface_of_an_unrecorded_release():
    with pytest.raises(KeyError, match="no surface recorded"):
        load_surface("1.0.0")
