"""`Unsupported`: raised when capture meets a construct it cannot model.

Without fullgraph, capture turns it into a graph break (the construct runs in plain Python
between two graphs); with `fullgraph=True` it reaches the user. Every message names the
user's file and line, the construct, and what to do; the kind comes from the catalogue in
breaks.py.
"""

from __future__ import annotations

from typing import Any

from ember.capture.breaks import CATALOGUE, GraphBreak
from ember.capture.errors import CaptureError
from ember.prims import SourceLocation


class Unsupported(CaptureError):
    """Capture cannot model a construct; the message says which, where, and what to do."""

    def __init__(
        self,
        construct: str,
        hint: str = "",
        location: SourceLocation | None = None,
        kind: str = "unsupported-construct",
    ):
        self.construct = construct
        self.hint = hint
        self.location = location
        self.kind = kind
        # The index of the compiled function's own instruction that was running (set by the
        # root frame), where a graph break goes.
        self.root_pc: int | None = None
        self.root_visit = 0
        # A torch call raised after the program was told it runs under a compiler
        # (torch.compiler.is_compiling()): a path eager may never take.
        self.compiler_path = False
        super().__init__(self._message())

    @classmethod
    def of(cls, kind: str, **fields: Any) -> Unsupported:
        """The error of catalogue entry `kind`, its template filled with `fields`."""
        entry = CATALOGUE[kind]
        return cls(entry.template.format(**fields), entry.hint, kind=kind)

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

    def as_break(self, broke: SourceLocation | None = None) -> GraphBreak:
        """The graph break this error becomes; `broke` is where the compiled function broke."""
        hint = self.hint or CATALOGUE[self.kind].hint
        where = ""
        if broke is not None and broke != self.location:
            where = f"{broke.function} at {broke.short()}"
        return GraphBreak(self.kind, self.construct, hint, self.location, where)
