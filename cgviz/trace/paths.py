"""File paths as a trace keeps them: traces are shared between machines, and an absolute path
names the recording machine's directories (and user) while meaning nothing elsewhere. Both
producers use these (torch's messages, the user's source lines)."""

from __future__ import annotations

import os
import re

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
