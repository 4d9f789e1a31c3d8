"""`Progress`: a one-line progress bar for kernel compilation, shown only when it is slow.

Nothing is printed until `threshold` seconds have passed, so quick compiles stay silent; after
that each finished kernel redraws `\\r[ember] compiling Triton kernels  12/40 [####......] 3.1 s`.
The clock and the stream are arguments, so tests drive it without waiting.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

WIDTH = 24


class Progress:
    """Counts finished jobs out of `total` and draws the bar once `threshold` seconds passed."""

    def __init__(
        self,
        total: int,
        *,
        label: str = "compiling Triton kernels",
        threshold: float = 2.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.done = 0
        self.label = label
        self.threshold = threshold
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.shown = False
        self._lock = threading.Lock()

    def advance(self, count: int = 1) -> None:
        """`count` more jobs finished; redraw if the bar is due."""
        with self._lock:
            self.done += count
            if self.clock() - self.start >= self.threshold:
                self._draw()

    def close(self) -> None:
        """Finish the line (only if the bar was drawn)."""
        with self._lock:
            if self.shown:
                self._draw()
                self.stream.write("\n")
                self.stream.flush()

    def _draw(self) -> None:
        filled = WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (WIDTH - filled)
        elapsed = self.clock() - self.start
        width = len(str(self.total))
        line = f"[ember] {self.label} {self.done:>{width}}/{self.total} [{bar}] {elapsed:.1f} s"
        self.stream.write("\r" + line)
        self.stream.flush()
        self.shown = True
