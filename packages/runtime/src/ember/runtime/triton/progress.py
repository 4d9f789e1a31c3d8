"""`Progress`: compile progress, shown only when compiling is slow, and honest about where it
is written.

Nothing is printed until `threshold` seconds have passed, so quick compiles stay silent. On a
terminal one line is redrawn in place (at most ten times a second):
`\\r[ember] compiling Triton kernels  12/40 [#####...] 3.1 s`. Anywhere else (a log file, CI)
carriage returns would leave every redraw in the file, so it writes whole lines, at most five
per compile: when it becomes slow, at each quarter passed after that, and when it is done.
The clock, the stream and the choice of mode are arguments, so tests drive it without waiting.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

WIDTH = 24
REDRAW_INTERVAL = 0.1  # seconds between redraws of the live line
QUARTERS = (0.25, 0.5, 0.75)


class Progress:
    """Counts finished jobs out of `total` and reports once `threshold` seconds passed.

    `interactive` chooses the live line (True) or whole lines (False); by default the live
    line when `stream` is a terminal."""

    def __init__(
        self,
        total: int,
        *,
        label: str = "compiling Triton kernels",
        threshold: float = 2.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        interactive: bool | None = None,
    ) -> None:
        self.total = total
        self.done = 0
        self.label = label
        self.threshold = threshold
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.shown = False
        if interactive is None:
            isatty = getattr(self.stream, "isatty", None)
            interactive = bool(isatty()) if callable(isatty) else False
        self.interactive = interactive
        self._drawn_at = -REDRAW_INTERVAL
        self._quarters_left = list(QUARTERS)
        self._lock = threading.Lock()

    def advance(self, count: int = 1) -> None:
        """`count` more jobs finished; report if a report is due."""
        with self._lock:
            self.done += count
            now = self.clock()
            if now - self.start < self.threshold:
                return
            if self.interactive:
                if now - self._drawn_at >= REDRAW_INTERVAL or self.done >= self.total:
                    self._draw(now)
            elif not self.shown:
                self._drop_quarters()
                self._line(now)
            elif self._quarters_left and self.done >= self._quarters_left[0] * self.total:
                self._drop_quarters()
                if self.done < self.total:  # the last line says it is done
                    self._line(now)

    def close(self) -> None:
        """Finish: end the live line, or write the closing line (only if anything was shown)."""
        with self._lock:
            if not self.shown:
                return
            now = self.clock()
            if self.interactive:
                self._draw(now)
                self.stream.write("\n")
            else:
                self.stream.write(
                    f"[ember] {self.label}: {self.done}/{self.total} done in "
                    f"{now - self.start:.1f} s\n"
                )
            self.stream.flush()

    def _drop_quarters(self) -> None:
        while self._quarters_left and self.done >= self._quarters_left[0] * self.total:
            self._quarters_left.pop(0)

    def _line(self, now: float) -> None:
        width = len(str(self.total))
        self.stream.write(
            f"[ember] {self.label} {self.done:>{width}}/{self.total} ({now - self.start:.1f} s)\n"
        )
        self.stream.flush()
        self.shown = True

    def _draw(self, now: float) -> None:
        filled = WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (WIDTH - filled)
        width = len(str(self.total))
        line = (
            f"[ember] {self.label} {self.done:>{width}}/{self.total} [{bar}] "
            f"{now - self.start:.1f} s"
        )
        self.stream.write("\r" + line)
        self.stream.flush()
        self._drawn_at = now
        self.shown = True
