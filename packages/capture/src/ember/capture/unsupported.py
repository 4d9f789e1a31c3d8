"""`Unsupported`: the named error raised when capture meets a construct it cannot model yet.

Every message names the user's file and line and the construct. The next issue (graph
breaks) turns most of these into breaks instead of errors.
"""

from __future__ import annotations

from ember.capture.errors import CaptureError
from ember.prims import SourceLocation


class Unsupported(CaptureError):
    """Capture cannot model a construct; the message says which, where, and what to do."""

    def __init__(self, construct: str, hint: str = "", location: SourceLocation | None = None):
        self.construct = construct
        self.hint = hint
        self.location = location
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"{self.location.short()}: " if self.location is not None else ""
        code = f" (`{self.location.code}`)" if self.location and self.location.code else ""
        hint = f"; {self.hint}" if self.hint else ""
        return f"{where}ember.compile does not support {self.construct}{code}{hint}"

    def at(self, location: SourceLocation | None) -> Unsupported:
        """This error, located at `location` unless it already names a line."""
        if self.location is None and location is not None:
            self.location = location
            self.args = (self._message(),)
        return self
