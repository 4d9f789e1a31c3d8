"""Compile progress is silent for quick compiles; a slow one redraws one line on a terminal
and writes at most five whole lines anywhere else (a 110-kernel compile into a log file)."""

from __future__ import annotations

import io

from ember.runtime.triton.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_quick_compiles_print_nothing() -> None:
    clock, stream = Clock(), io.StringIO()
    progress = Progress(3, threshold=2.0, stream=stream, clock=clock)
    for _ in range(3):
        clock.now += 0.5
        progress.advance()
    progress.close()
    assert stream.getvalue() == ""


def test_slow_compiles_show_one_line_on_a_terminal() -> None:
    clock, stream = Clock(), io.StringIO()
    progress = Progress(40, threshold=2.0, stream=stream, clock=clock, interactive=True)
    clock.now += 1.0
    progress.advance()  # 1 s in: still quiet
    assert stream.getvalue() == ""
    clock.now += 2.5
    progress.advance(11)
    assert stream.getvalue() == (
        "\r[ember] compiling Triton kernels 12/40 [#######.................] 3.5 s"
    )
    clock.now += 1.0
    progress.advance(28)
    progress.close()
    text = stream.getvalue()
    assert text.endswith("40/40 [########################] 4.5 s\n")
    assert text.count("\n") == 1  # one line, redrawn with carriage returns


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_live_line_by_default_redrawn_at_most_ten_times_a_second() -> None:
    clock, stream = Clock(), Terminal()
    progress = Progress(110, threshold=2.0, stream=stream, clock=clock)
    clock.now += 3.0
    for _ in range(110):
        clock.now += 0.01  # a kernel every 10 ms: 1.1 s of redraws
        progress.advance()
    progress.close()
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("110/110 [########################] 4.1 s\n")
    assert 10 <= text.count("\r") <= 13


def test_a_log_file_gets_at_most_five_lines_for_110_kernels() -> None:
    clock, stream = Clock(), io.StringIO()  # not a terminal
    progress = Progress(110, threshold=2.0, stream=stream, clock=clock)
    for _ in range(110):
        clock.now += 0.3  # 33 s in all
        progress.advance()
    progress.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert lines == [
        "[ember] compiling Triton kernels   7/110 (2.1 s)",
        "[ember] compiling Triton kernels  28/110 (8.4 s)",
        "[ember] compiling Triton kernels  55/110 (16.5 s)",
        "[ember] compiling Triton kernels  83/110 (24.9 s)",
        "[ember] compiling Triton kernels: 110/110 done in 33.0 s",
    ]


def test_a_log_file_hears_nothing_of_a_quick_compile() -> None:
    clock, stream = Clock(), io.StringIO()
    progress = Progress(110, threshold=2.0, stream=stream, clock=clock)
    for _ in range(110):
        clock.now += 0.01
        progress.advance()
    progress.close()
    assert stream.getvalue() == ""
