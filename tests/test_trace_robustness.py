"""Trace files that would load and then fail, and saves that must not replace what is there."""

from __future__ import annotations

import errno
import inspect
import json
import os
import socket
import stat
import sys
from pathlib import Path

import pytest

from cgviz.cli import main
from cgviz.trace import io
from cgviz.trace.io import META_DEPTH, TraceFormatError, load_trace, save_trace, to_dict
from cgviz.trace.model import Trace, safe_text
from cgviz.views import html as html_view
from cgviz.views.html import to_html
from test_trace_io import LAYOUTS, hand_trace, write_json

# hand_trace: steps 0..4; step 2 repeats 7 times; steps 0..3 have snapshots (tables: 3 snapshots,
# 3 nodes, 3 outputs, 1 segment, 3 blocks).


def bad_load(path: Path, *expected: str) -> str:
    """Load `path`, expecting a TraceFormatError that names the file and holds `expected`."""
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    for part in expected:
        assert part in message, message
    return message


def with_raw(data: dict, raw: str) -> str:
    """`data` as JSON text with the string "RAW" replaced by `raw`, JSON that json.dumps() would
    not write (an escaped lone surrogate, a huge integer, NaN)."""
    text = json.dumps(data)
    assert text.count('"RAW"') == 1
    return text.replace('"RAW"', raw)


# -- span and repeat --------------------------------------------------------------------------
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("step, span", [(2, 0), (2, -1), (2, 4), (1, 99), (0, 2)])
def test_span_outside_the_steps_is_refused(tmp_path, layout, step, span):
    data = LAYOUTS[layout](hand_trace())
    data["steps"][step]["span"] = span
    bad_load(write_json(tmp_path / "t.json", data), f"step {step}: field 'span' must be from 1 to {step + 1}",
             f"(got {span})")


def test_span_reaching_the_first_step_loads_and_renders(tmp_path):
    data = to_dict(hand_trace())
    data["steps"][2]["span"] = 3  # steps 0..2 repeated 7 times
    trace = load_trace(write_json(tmp_path / "t.json", data))
    assert trace.calls == 3 * 7 + 2
    assert "3-step block" in to_html(trace, renderer="builtin")


@pytest.mark.parametrize("repeat, problem", [(0, "must be at least 1"), (-3, "must be at least 1"),
                                             (1.5, "must be an integer"), (True, "must be an integer")],
                         ids=["0", "-3", "1.5", "true"])
def test_repeat_must_be_a_positive_integer(tmp_path, repeat, problem):
    data = to_dict(hand_trace())
    data["steps"][2]["repeat"] = repeat
    bad_load(write_json(tmp_path / "t.json", data), f"step 2: field 'repeat' {problem}")


# -- nesting ------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["meta", "steps"])
def test_deep_nesting_is_a_clear_error(tmp_path, where):
    data = to_dict(hand_trace())
    data[where] = "RAW"
    path = tmp_path / "t.json"
    depth = 100_000  # past the parser's limit on every Python (3.13 reads 5,000 levels)
    path.write_text(with_raw(data, "[" * depth + "]" * depth), encoding="utf-8")
    bad_load(path, "nested too deeply to read")


def test_recursion_in_the_builder_is_a_clear_error():
    data = to_dict(hand_trace())
    limit, raised = sys.getrecursionlimit(), None
    sys.setrecursionlimit(len(inspect.stack()) + 10)  # too few frames left to build a snapshot
    try:
        io.from_dict(data)
    except Exception as exc:  # noqa: BLE001 - which exception is what the test checks
        raised = exc
    finally:
        sys.setrecursionlimit(limit)
    assert isinstance(raised, TraceFormatError) and "nested too deeply to read" in str(raised), repr(raised)


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_meta_nested_deeper_than_can_be_saved_is_refused(tmp_path):
    data = to_dict(hand_trace())
    data["meta"]["deep"] = nested(META_DEPTH * 3)  # json reads it; saving it again would not work
    bad_load(write_json(tmp_path / "t.json", data), f"field 'meta' nests deeper than {META_DEPTH} levels")


def test_meta_as_deep_as_allowed_loads_and_saves_again(tmp_path):
    data = to_dict(hand_trace())
    data["meta"]["deep"] = nested(META_DEPTH - 1)  # meta itself is the first level
    trace = load_trace(write_json(tmp_path / "t.json", data))
    save_trace(trace, tmp_path / "again.json")
    assert load_trace(tmp_path / "again.json") == trace


# -- numbers ------------------------------------------------------------------------------------
HUGE = "9" * 100_000


LIMIT = f"more than the {sys.get_int_max_str_digits()} Python converts"


@pytest.mark.parametrize("place, expected", [
    (("steps", 2, "generation"), ["step 2: field 'generation' is an integer of 100000 digits", LIMIT]),
    (("tables", "blocks", 0, "size"),
     ["step 0 snapshot segment 0 block 0: field 'size' is an integer of 100000 digits", LIMIT]),
    (("meta", "n"), ["field 'meta[\"n\"]' is an integer of 100000 digits", LIMIT]),
    (("schema_version",), ["'schema_version' must be a positive integer, not a 100000-digit integer"]),
], ids=["step", "table entry", "meta", "schema version"])
def test_integer_too_long_names_file_and_field(tmp_path, place, expected):
    data = to_dict(hand_trace())
    target = data
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = "RAW"
    path = tmp_path / "t.json"
    path.write_text(with_raw(data, HUGE), encoding="utf-8")
    bad_load(path, *expected)


@pytest.mark.parametrize("raw, expected", [
    ("NaN", "step 2: field 'duration' is NaN, which is not a JSON number"),
    ("-Infinity", "step 2: field 'duration' is -Infinity, which is not a JSON number"),
    ("1e999", "step 2: field 'duration' must be a finite number, not inf"),
], ids=["NaN", "-Infinity", "1e999"])
def test_non_finite_duration_is_refused(tmp_path, raw, expected):
    data = to_dict(hand_trace())
    data["steps"][2]["duration"] = "RAW"
    path = tmp_path / "t.json"
    path.write_text(with_raw(data, raw), encoding="utf-8")
    bad_load(path, expected)


@pytest.mark.parametrize("raw, problem", [("NaN", "is NaN, which is not a JSON number"),
                                          ("Infinity", "is Infinity, which is not a JSON number"),
                                          ("-1e400", "must be a finite number, not -inf")],
                         ids=["NaN", "Infinity", "-1e400"])
def test_non_finite_meta_is_refused_since_it_could_not_be_saved(tmp_path, raw, problem):
    data = to_dict(hand_trace())
    data["meta"]["nested"]["a"][1] = "RAW"
    path = tmp_path / "t.json"
    path.write_text(with_raw(data, raw), encoding="utf-8")
    bad_load(path, f"field 'meta[\"nested\"][\"a\"][1]' {problem}")


# -- lone surrogates ----------------------------------------------------------------------------
SURROGATE_FIELDS = {
    "step reason": (("steps", 0, "reason"), "step 0: field 'reason'"),
    "step function": (("steps", 4, "function"), "step 4: field 'function'"),
    "node function": (("tables", "nodes", 1, "function"), "step 1 snapshot node 1: field 'function'"),
    "output dtype": (("tables", "outputs", 0, "dtype"), "step 0 snapshot node 0 output 0: field 'dtype'"),
    "block owner": (("tables", "blocks", 0, "owner"), "step 0 snapshot segment 0 block 0: field 'owner'"),
    "node signature": (("tables", "nodes", 0, "signature"), "step 0 snapshot node 0: field 'signature'"),
    "segment kind": (("tables", "segments", 0, "kind"), "step 0 snapshot segment 0: field 'kind'"),
    "meta value": (("meta", "device"), "field 'meta[\"device\"]'"),
}


@pytest.mark.parametrize("case", sorted(SURROGATE_FIELDS))
def test_lone_surrogate_is_refused_naming_file_step_and_field(tmp_path, case):
    place, expected = SURROGATE_FIELDS[case]
    data = to_dict(hand_trace())
    target = data
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = "RAW"
    path = tmp_path / "t.json"
    path.write_text(with_raw(data, '"ok \\ud800 then"'), encoding="utf-8")
    bad_load(path, expected, "must be valid Unicode text", "lone surrogate '\\ud800' at character 3")


def test_lone_surrogate_in_a_meta_key_is_refused(tmp_path):
    data = to_dict(hand_trace())
    data["meta"] = "RAW"
    path = tmp_path / "t.json"
    path.write_text(with_raw(data, '{"k\\udcff": 1}'), encoding="utf-8")
    bad_load(path, "field 'meta' has a key that must be valid Unicode text", "'\\udcff' at character 1")


def test_escaped_surrogate_pair_is_valid_text(tmp_path):
    data = to_dict(hand_trace())
    data["steps"][0]["reason"] = "RAW"
    path = tmp_path / "t.json"
    path.write_text(with_raw(data, '"smile \\ud83d\\ude00"'), encoding="utf-8")
    assert load_trace(path).steps[0].reason == "smile \U0001F600"


# -- saving text from user code -----------------------------------------------------------------
def test_safe_text_escapes_only_lone_surrogates():
    assert safe_text("a\udcffb") == "a\\udcffb"
    assert safe_text("g \ud800\udc00") == "g \\ud800\\udc00"  # a pair of lone surrogates in a str
    assert safe_text("ok → ü") == "ok → ü"
    assert safe_text("\udcff").encode("utf-8") == b"\\udcff"


def surrogate_trace() -> Trace:
    trace = hand_trace()
    trace.steps[4].reason = "g raised ValueError: bad byte \udcff"
    trace.steps[4].function = "g\udcff"
    trace.steps[1].snapshot.nodes[1].function = "g\udcff"
    trace.meta["key \udcff"] = "value \ud800"
    return trace


def test_lone_surrogates_from_user_code_save_load_and_render(tmp_path):
    trace = surrogate_trace()
    path = tmp_path / "t.json"
    trace.save(path)
    json.loads(path.read_bytes().decode("utf-8"))  # valid UTF-8 JSON
    loaded = Trace.load(path)
    assert loaded.steps[4].reason == "g raised ValueError: bad byte \\udcff"  # the escape, as text
    assert loaded.steps[4].function == "g\\udcff"
    assert loaded.steps[1].snapshot.nodes[1].function == "g\\udcff"
    assert loaded.meta["key \\udcff"] == "value \\ud800"
    assert loaded.steps[0] == hand_trace().steps[0]  # the rest as it was
    for source in (trace, loaded):
        page = to_html(source, tmp_path / "t.html", renderer="builtin", title="run \udcff")
        assert (tmp_path / "t.html").read_text(encoding="utf-8") == page
        assert "bad byte \\\\udcff" in page and "<title>run \\udcff</title>" in page  # shown as escape text


def test_dumps_is_valid_utf8_whatever_the_strings_hold():
    text = io.dumps(surrogate_trace())
    text.encode("utf-8")
    assert io.loads(text).steps[4].function == "g\\udcff"


def test_rendering_leaves_the_trace_unchanged():
    trace = surrogate_trace()
    to_html(trace, renderer="builtin")
    assert trace.steps[4].function == "g\udcff"


# -- what a save must not replace ---------------------------------------------------------------
def make_fifo(path: Path) -> str:
    os.mkfifo(path)
    return "a FIFO"


def make_char_device(path: Path) -> str:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    except PermissionError:
        pytest.skip("no permission to make a device node")
    return "a character device"


def make_socket(path: Path) -> str:
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
    except OSError:
        pytest.skip("cannot bind a socket at this path")
    finally:
        sock.close()
    return "a socket"


def saves(trace: Trace) -> dict:
    """Every way cgviz writes a file, each as a function of the path."""
    return {
        "save_trace": lambda p: save_trace(trace, p),
        "Trace.save": trace.save,
        "to_html": lambda p: to_html(trace, p, renderer="builtin"),
    }


@pytest.mark.parametrize("how", ["save_trace", "Trace.save", "to_html"])
@pytest.mark.parametrize("make", [make_fifo, make_char_device, make_socket], ids=["fifo", "device", "socket"])
def test_special_file_is_refused_and_left_in_place(tmp_path, make, how):
    path = tmp_path / "t.out"
    what = make(path)
    mode = os.lstat(path).st_mode
    with pytest.raises(OSError) as info:
        saves(hand_trace())[how](path)
    assert str(info.value).endswith(f"{path}: it is {what}, not a regular file")
    assert os.lstat(path).st_mode == mode and os.listdir(tmp_path) == ["t.out"]


def test_html_target_is_checked_before_the_page_is_built(tmp_path, monkeypatch):
    make_fifo(tmp_path / "t.html")
    monkeypatch.setattr(html_view, "page_whole", None)  # building a page would fail otherwise
    with pytest.raises(OSError, match="it is a FIFO"):
        to_html(hand_trace(), tmp_path / "t.html")


@pytest.mark.parametrize("how", ["save_trace", "to_html"])
def test_read_only_file_is_refused_and_unchanged(tmp_path, how):
    path = tmp_path / "t.json"
    path.write_text("old")
    path.chmod(0o444)
    with pytest.raises(PermissionError, match="the file is read-only") as info:
        saves(hand_trace())[how](path)
    assert str(path) in str(info.value)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["t.json"]


def test_directory_is_refused_naming_it(tmp_path):
    (tmp_path / "t.json").mkdir()
    with pytest.raises(IsADirectoryError) as info:
        save_trace(hand_trace(), tmp_path / "t.json")
    assert str(info.value).endswith(f"{tmp_path / 't.json'}: it is a directory")
    assert os.listdir(tmp_path) == ["t.json"]


def test_parent_that_is_a_file_is_named(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError, match=f"{tmp_path / 'f'} is not a directory"):
        save_trace(hand_trace(), tmp_path / "f" / "t.json")


def test_existing_file_keeps_its_permission_bits(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("old")
    path.chmod(0o640)
    save_trace(hand_trace(), path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert load_trace(path) == hand_trace()


def test_symlink_target_is_written_and_the_link_kept(tmp_path):
    target = tmp_path / "data" / "t.json"
    target.parent.mkdir()
    target.write_text("old")
    (tmp_path / "hop").symlink_to(target)
    link = tmp_path / "t.json"
    link.symlink_to(tmp_path / "hop")  # a link to a link
    save_trace(hand_trace(), link)
    assert link.is_symlink() and (tmp_path / "hop").is_symlink()
    assert load_trace(target) == hand_trace()
    assert sorted(os.listdir(tmp_path)) == ["data", "hop", "t.json"] and os.listdir(target.parent) == ["t.json"]


def test_symlink_to_a_fifo_names_the_target_and_the_link(tmp_path):
    make_fifo(tmp_path / "fifo")
    (tmp_path / "t.json").symlink_to(tmp_path / "fifo")
    with pytest.raises(OSError, match="the target of the link") as info:
        save_trace(hand_trace(), tmp_path / "t.json")
    assert f"{tmp_path / 'fifo'} (the target of the link {tmp_path / 't.json'}): it is a FIFO" in str(info.value)


def fail_open(monkeypatch, tmp_path):
    real = os.open

    def refuse(path, *args, **kwargs):
        if str(path).endswith(".tmp"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    return lambda fh: fh.write("new")


def fail_write(monkeypatch, tmp_path):
    def full(fh):
        fh.write("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return full


def fail_replace(monkeypatch, tmp_path):
    def refuse(src, dst):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), src, dst)

    monkeypatch.setattr(os, "replace", refuse)
    return lambda fh: fh.write("new")


@pytest.mark.parametrize("stage", [fail_open, fail_write, fail_replace], ids=["open", "write", "replace"])
def test_os_errors_name_the_target_not_the_temp_file(tmp_path, monkeypatch, stage):
    path = tmp_path / "t.json"
    path.write_text("old")
    write = stage(monkeypatch, tmp_path)
    with pytest.raises(OSError) as info:
        io.write_atomic(path, write, "trace")
    monkeypatch.undo()
    assert info.value.filename == str(path) and info.value.filename2 is None
    assert ".tmp" not in str(info.value)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["t.json"]


# -- the command ----------------------------------------------------------------------------------
def test_render_of_a_bad_span_is_one_clear_line(tmp_path, capsys):
    data = to_dict(hand_trace())
    data["steps"][1]["span"] = 99
    path = write_json(tmp_path / "t.json", data)
    assert main(["render", str(path), "-o", str(tmp_path / "t.html")]) == 1
    err = capsys.readouterr().err
    assert err == f"cgviz render: {path}: step 1: field 'span' must be from 1 to 2: a block of steps ending at " \
                  f"step 1 cannot start before step 0 (got 99)\n"
    assert not (tmp_path / "t.html").exists()


@pytest.mark.parametrize("command", ["render", "demo"])
def test_command_refuses_a_fifo_output(tmp_path, capsys, command):
    fifo = tmp_path / "out.html"
    make_fifo(fifo)
    trace = tmp_path / "t.json"
    save_trace(hand_trace(), trace)
    args = ["render", str(trace)] if command == "render" else ["demo", "--backend", "sim"]
    assert main([*args, "-o", str(fifo)]) == 1
    assert f"cannot save HTML to {fifo}: it is a FIFO, not a regular file" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
