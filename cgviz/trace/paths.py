"""File paths as a trace keeps them: traces are shared between machines, and an absolute path
names the recording machine's directories (and user) while meaning nothing elsewhere. Both
producers use these (torch's messages, the user's source lines)."""

from __future__ import annotations

import linecache
import os
import re
from typing import Any, Iterable, Iterator, Optional

# An absolute path in torch's messages: quoted (it may hold spaces), or bare with at least two
# components (so "warmup/record" or a URL is left alone); POSIX or with a Windows drive.
_SEP = r"[\\/]"
_WORD = r"[^\s\"'<>:,;()\[\]\\/]+"
_ABSOLUTE_PATH = re.compile(
    rf"""(?P<q>["'])(?P<quoted>(?:[A-Za-z]:)?{_SEP}[^"'\n]+)(?P=q)"""
    rf"""|(?<![\w./\\:])(?P<bare>(?:[A-Za-z]:)?(?:{_SEP}{_WORD}){{2,}})"""
)


def portable_path(path: str) -> str:
    """`path` as a trace keeps it. Traces are shared between machines, and an absolute path
    names the recording machine's directories (and user) while meaning nothing elsewhere:
    inside a site-packages or dist-packages directory it becomes the part after it
    (torch/_inductor/cudagraph_trees.py), inside the current directory relative to it, and
    anywhere else its last two components."""
    norm = re.sub(r"^[A-Za-z]:", "", path.replace("\\", "/"))
    for packages in ("/site-packages/", "/dist-packages/"):
        if packages in norm:
            return norm.rsplit(packages, 1)[1]
    cwd = os.getcwd().replace("\\", "/").rstrip("/") + "/"
    if cwd != "/" and norm.startswith(cwd):
        return norm[len(cwd):]
    return "/".join([part for part in norm.split("/") if part][-2:])


def portable_paths(text: str) -> str:
    """`text` (a reason: torch's messages carry stack traces) with every absolute path made
    portable (see portable_path)."""
    if "/" not in text and "\\" not in text:
        return text

    def shorten(match: re.Match) -> str:
        if match["quoted"] is not None:
            return match["q"] + portable_path(match["quoted"]) + match["q"]
        return portable_path(match["bare"])

    return _ABSOLUTE_PATH.sub(shorten, text)


def source_line(filename: str, lineno: int, function: str, code: str = "") -> str:
    """A place in the user's code as reasons name it: "model.py:42 in forward (y.sum().item())",
    its path portable (the doctor reads it back: diagnose.user_source)."""
    code = " ".join(code.split())[:80]
    return f"{portable_path(filename)}:{lineno} in {function}" + (f" ({code})" if code else "")


# -- the user's line: the innermost frame of a stack that is the user's code ----------------------
Frame = tuple[str, int, str, int]  # (file, line, function, the function's first line)


def code_dirs(*dirs: str) -> tuple[str, ...]:
    """Directories whose files are not the user's code, as prefixes of real paths."""
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


def frames_from(frame: Any) -> Iterator[Frame]:
    """A live stack's frames, innermost first (from sys._getframe)."""
    while frame is not None:
        code = frame.f_code
        yield code.co_filename, frame.f_lineno, code.co_name, code.co_firstlineno
        frame = frame.f_back


def traceback_frames(tb: Any) -> list[Frame]:
    """An exception's traceback, innermost first."""
    out = []
    while tb is not None:
        code = tb.tb_frame.f_code
        out.append((code.co_filename, tb.tb_lineno, code.co_name, code.co_firstlineno))
        tb = tb.tb_next
    return out[::-1]


def user_line(frames: Iterable[Frame], not_users: tuple[str, ...], *, skip_def_lines: bool = False) -> Optional[str]:
    """The innermost frame in a file outside `not_users` (code_dirs), as source_line names it, or
    None. `skip_def_lines`: pass over a frame that stands at its function's first line (the frame
    of a function torch.compile runs: its caller's line is the one that matters)."""
    for filename, lineno, function, first in frames:
        if filename.startswith("<") or os.path.realpath(filename).startswith(not_users):
            continue
        if skip_def_lines and lineno == first:
            continue
        return source_line(filename, lineno, function, linecache.getline(filename, lineno))
    return None
