"""A user's files, read and written safely; used for traces, torch profiler traces and pages alike.

Reading (`read_file`) takes regular files only: a directory, FIFO, device or socket is refused
before it is opened, so nothing blocks or reads without end, and a file over `MAX_FILE_BYTES`
(512 MiB; the environment variable CGVIZ_MAX_FILE_MB sets another limit) is refused before it is
read and cut off if it grows past the limit while it is read; so is what a gzipped file
decompresses to (`decompressed`). Writing (`write_atomic`) goes through a temp file renamed over
the target, so a crash or error mid-write leaves any previous file intact.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import stat
from typing import Callable, Optional, TextIO


def write_atomic(path: str | os.PathLike, write: Callable[[TextIO], None], what: str = "file") -> None:
    """Write through `write(fh)` to a temp file beside the target, fsync it, then rename it over
    the target, so a crash or error mid-write leaves any previous file intact.

    The target is `path`, or the file a symbolic link at `path` points to (the link stays a
    link). An existing target must be a writable regular file, and keeps its permission bits;
    anything else (a directory, a FIFO, a device, a read-only file) is refused before anything
    is written, since renaming over it would silently replace it. Errors name the target.
    """
    target, mode = _save_target(path, what)
    directory = os.path.dirname(os.path.abspath(target))
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode as for open(): umask applies
    except OSError as exc:
        raise _naming(exc, target) from None
    try:
        with open(fd, "w", encoding="utf-8", newline="\n") as fh:
            if mode is not None:
                os.chmod(tmp, mode)  # the file replaced keeps its permission bits
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _naming(exc, target) from None
        raise
    with contextlib.suppress(OSError, AttributeError):  # make the rename durable where supported
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def check_save_target(path: str | os.PathLike, what: str = "file") -> None:
    """Raise now what `write_atomic(path, ...)` would refuse, before work whose result it
    would write (an HTML page can take a while to build)."""
    _save_target(path, what)


def _save_target(path: str | os.PathLike, what: str) -> tuple[str, Optional[int]]:
    """The file a save to `path` writes (`path`, or a symbolic link's target) and the permission
    bits of the file there (None when there is none yet); raises when it must not be replaced."""
    path = _checked_path(os.fspath(path), f"cannot save {what}")
    target = os.path.realpath(path) if os.path.islink(path) else path
    shown = target if target == path else f"{target} (the target of the link {path})"
    if target != path and not os.path.lexists(target):  # a link to no file of that name: /dev/stdout in a
        try:  # pipeline (/proc/self/fd/1 -> 'pipe:[...]'), whose pipe stat reaches through the link
            followed: Optional[os.stat_result] = os.stat(path)
        except OSError:
            followed = None
        if followed is not None:
            _require_regular(followed, f"cannot save {what} to {path}")
    return target, _replaceable(target, shown, what)


def _checked_path(path: str | bytes, doing: str) -> str:
    """`path`, unless no file can have it as a name: refused naming what was being done ("cannot
    save trace"), where the OS would say "No such file or directory: ''" or "embedded null byte"."""
    path = os.fsdecode(path)
    if not path:
        raise FileNotFoundError(f"{doing}: the path is empty (give a file name)")
    if "\0" in path:
        raise ValueError(f"{doing} to {path!r}: a file name cannot hold a NUL character")
    return path


_NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _replaceable(target: str, shown: str, what: str) -> Optional[int]:
    """The permission bits of the file at `target`, or None when there is none yet; raises
    (naming `shown`) when a save must not go there."""
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):
        if os.path.exists(directory):
            raise NotADirectoryError(f"cannot save {what} to {shown}: {directory} is not a directory")
        raise FileNotFoundError(f"cannot save {what} to {shown}: directory {directory} does not exist")
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a loop of symbolic links, ...
        raise _naming(exc, target) from None
    if st is not None:
        _require_regular(st, f"cannot save {what} to {shown}")
    if st is not None and (not st.st_mode & 0o222 or not os.access(target, os.W_OK)):
        raise PermissionError(f"cannot save {what} to {shown}: the file is read-only (left unchanged)")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot save {what} to {shown}: directory {directory} is not writable")
    return None if st is None else stat.S_IMODE(st.st_mode)


def special_kind(mode: int) -> str:
    """What a file that is neither regular nor a directory is, in words ("a FIFO")."""
    return next((name for test, name in _NOT_REGULAR if test(mode)), "a special file")


def _require_regular(st: os.stat_result, doing: str) -> None:
    """Raise, saying `doing` ("cannot read trace x.json"), unless `st` is a regular file's."""
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"{doing}: it is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{doing}: it is {special_kind(st.st_mode)}, not a regular file")


def _naming(exc: OSError, target: str) -> OSError:
    """`exc` as raised for `target`: an OS error about the temp file or an unnamed one (a full
    disk) names the file the caller asked for instead."""
    if exc.errno is None or not exc.strerror:
        return exc
    return type(exc)(exc.errno, exc.strerror, target)


# The most a file given to cgviz (a trace, a profiler trace, what a gzipped one decompresses to)
# may hold. It is checked before reading (the file's size) and while reading (a file that grows,
# or one whose size says nothing, such as those of /proc), so no file makes cgviz read without
# end. The environment variable raises or lowers it, in MiB.
MAX_FILE_BYTES = 512 << 20
MAX_FILE_ENV = "CGVIZ_MAX_FILE_MB"
_CHUNK = 1 << 20


def max_file_bytes(error: type[Exception] = ValueError) -> int:
    """The limit on what a file read may hold: `MAX_FILE_BYTES`, or CGVIZ_MAX_FILE_MB (MiB) when set."""
    text = os.environ.get(MAX_FILE_ENV, "").strip()
    if not text:
        return MAX_FILE_BYTES
    try:
        size = float(text)
    except ValueError:
        size = math.nan
    if not (math.isfinite(size) and size > 0):
        raise error(f"{MAX_FILE_ENV} must be a positive number of MiB, not {text!r}")
    return max(1, int(size * (1 << 20)))


def mib(n: int) -> str:
    """4294967296 -> '4096 MiB', 10485 -> '0.01 MiB'."""
    return f"{n / (1 << 20):.3g} MiB" if n < 100 << 20 else f"{n / (1 << 20):.0f} MiB"


def read_file(path: str | os.PathLike, what: str, error: type[Exception]) -> bytes:
    """The bytes of the regular file at `path` (a symbolic link is followed), `what` naming it in
    messages ("trace").

    Anything else is refused before it is opened, since reading it could block (a FIFO, a socket)
    or never end (/dev/zero): `IsADirectoryError` or `OSError` "cannot read trace P: it is a FIFO,
    not a regular file". A file over `max_file_bytes()` raises `error` ("P: too large ...") before
    it is read, and one that turns out to hold more while it is read is cut there. The file is
    opened non-blocking and checked again once open, in case it was replaced in between.
    """
    path = os.fspath(path)
    limit = max_file_bytes(error)
    if "\0" in os.fsdecode(path):
        raise ValueError(f"cannot read {what} {path!r}: a file name cannot hold a NUL character")
    _require_regular(os.stat(path), f"cannot read {what} {path}")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    with open(fd, "rb", buffering=0) as fh:
        st = os.fstat(fd)
        _require_regular(st, f"cannot read {what} {path}")
        if st.st_size > limit:
            raise error(f"{path}: too large to read as a {what}: {mib(st.st_size)}, more than the limit of "
                        f"{mib(limit)} (set {MAX_FILE_ENV} to read larger files)")
        return _read_at_most(fh.read, st.st_size, limit, lambda: error(
            f"{path}: grew past the limit of {mib(limit)} while being read (set {MAX_FILE_ENV} to read larger files)"))


def _read_at_most(read: Callable[[int], bytes], expected: int, limit: int, too_much: Callable[[], Exception]) -> bytes:
    """Everything `read(n)` gives until it gives nothing, raising `too_much()` past `limit` bytes.
    The first read asks for `expected` bytes and one more, later ones for a chunk: memory follows
    what is there, not the limit."""
    chunks: list[bytes] = []
    total, want = 0, min(expected, limit) + 1
    while True:
        chunk = read(min(max(want - total, _CHUNK), limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise too_much()


def decompressed(raw: bytes, path: str, what: str, error: type[Exception]) -> bytes:
    """The content of gzip data `raw` (of the file `path`), refused past `max_file_bytes()`."""
    import gzip
    import zlib
    from io import BytesIO

    limit = max_file_bytes(error)
    try:
        with gzip.GzipFile(fileobj=BytesIO(raw)) as fh:
            return _read_at_most(fh.read, len(raw), limit, lambda: error(
                f"{path}: too large to read as a {what}: it decompresses to more than the limit of {mib(limit)} "
                f"(set {MAX_FILE_ENV} to read larger files)"))
    except (OSError, EOFError, zlib.error) as exc:
        raise error(f"{path}: not a {what} (a damaged gzip file: {exc})") from None
