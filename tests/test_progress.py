"""Long exports show progress: on a terminal and in a notebook the line is rewritten in place."""

from __future__ import annotations

import io

from cgviz.progress import ProgressBar
from cgviz.views.html import _in_kernel


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_notebook_stream_gets_one_line_rewritten_after_the_first_second():
    stream, clock = io.StringIO(), Clock()
    bar = ProgressBar(stream, clock=clock, rewrites=True)
    bar(10, 1000)  # quick work shows nothing
    assert stream.getvalue() == ""
    for done in (200, 400, 1000):
        clock.now += 1.0
        bar(done, 1000)
    bar.close()
    text = stream.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert "building page: 1,000/1,000 steps (100%)" in text


def test_a_log_gets_separate_lines_at_most_every_few_seconds():
    stream, clock = io.StringIO(), Clock()
    bar = ProgressBar(stream, clock=clock, rewrites=False)
    for done in range(1, 101):
        clock.now += 0.5
        bar(done, 100)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and 8 <= len(lines) <= 11


def test_plain_python_is_not_a_kernel():
    assert _in_kernel() is False
