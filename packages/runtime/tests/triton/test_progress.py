"""The compile progress bar is silent for quick compiles and one redrawn line for slow ones."""

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


def test_slow_compiles_show_one_line() -> None:
    clock, stream = Clock(), io.StringIO()
    progress = Progress(40, threshold=2.0, stream=stream, clock=clock)
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
