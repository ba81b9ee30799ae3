"""A progress line for work that takes a while (exports, demos), on a terminal, in a log or
in a notebook cell's output; used by `cgviz render`, `cgviz demo` and `to_html` in a kernel."""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """A progress line on stderr for work that takes a while: ``building page: 4,000/10,000
    steps``. On a terminal, nothing is shown for work done within `delay` seconds, then the
    line is rewritten in place (``\r``) at most every `every` seconds; elsewhere (a log), a
    line is written at most every `log_every` seconds, the first after that long, so quick
    work writes nothing; `close` ends the line. Called as
    ``bar(done, total, what)``, the progress callback of `cgviz.to_html`."""

    LABELS = {"steps": "building page", "trees": "drawing trees"}

    def __init__(self, stream: Optional[TextIO] = None, *, delay: float = 1.0, every: float = 0.1,
                 log_every: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 rewrites: Optional[bool] = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        # `rewrites`: the stream shows "\r" as a rewrite of the line (a terminal; a notebook's output)
        self.tty = bool(isatty and isatty()) if rewrites is None else rewrites
        self.delay, self.every = (delay, every) if self.tty else (max(delay, log_every), log_every)
        self.clock = clock
        self.start = clock()
        self.last = -float("inf")
        self.width = 0  # of the line shown on a terminal, to blank it when a shorter one follows
        self.shown = False

    def __call__(self, done: int, total: int, what: str = "steps") -> None:
        now = self.clock()
        if now - self.start < self.delay or (now - self.last < self.every and done < total):
            return
        self.last = now
        label = self.LABELS.get(what, what)
        text = f"{label}: {done:,}/{total:,} {what}" + (f" ({done / total:.0%})" if total else "")
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        """End the line on a terminal (when one was shown)."""
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()
        self.shown = False
