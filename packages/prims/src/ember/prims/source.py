"""User source locations: where in the user's program a node came from.

`SourceLocation` is plain data kept on every node; `user_location()` finds the innermost
stack frame that belongs to the user's code (not torch's, not ember's).
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
from dataclasses import dataclass
from types import FrameType

import torch

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# ember/<layer>/ directories are internal; ember's tests and examples are user code.
_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_INTERNAL_PREFIXES = (_TORCH_DIR,)


@dataclass(frozen=True)
class SourceLocation:
    """A line of user code: file, line number, function name and the code text."""

    file: str
    line: int
    function: str
    code: str = ""

    def short(self) -> str:
        """`model.py:12` style, used in messages."""
        return f"{os.path.basename(self.file)}:{self.line}"

    def __str__(self) -> str:
        text = f"{self.file}:{self.line} in {self.function}"
        return f"{text}: {self.code}" if self.code else text


@functools.lru_cache(maxsize=4096)
def _is_internal(filename: str) -> bool:
    # memoized: every recorded op walks its stack (hf_mbart training: 13,310 walks, 0.6 s)
    if filename.startswith(_INTERNAL_PREFIXES) or filename.startswith("<frozen"):
        return True
    if filename.startswith(_EMBER_DIR) or _is_ember_layer_file(filename):
        return True
    return "/torch/" in filename and "site-packages" in filename


def _is_ember_layer_file(filename: str) -> bool:
    # Editable installs put each layer under packages/<layer>/src/ember/<layer>/.
    parts = filename.replace(os.sep, "/").split("/")
    return any(parts[i] == "src" and parts[i + 1] == "ember" for i in range(len(parts) - 2))


def location_of_frame(frame: FrameType) -> SourceLocation:
    """The SourceLocation of one frame."""
    code = frame.f_code
    lineno = frame.f_lineno or code.co_firstlineno
    text = linecache.getline(code.co_filename, lineno).strip()
    return SourceLocation(code.co_filename, lineno, code.co_name, text)


def user_location(skip: int = 1) -> SourceLocation | None:
    """The innermost frame on the current stack that is user code, or None."""
    frame: FrameType | None = sys._getframe(skip)
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            return location_of_frame(frame)
        frame = frame.f_back
    return None
