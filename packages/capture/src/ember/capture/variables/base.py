"""The Variable base class: a Python value as the symbolic interpreter models it.

A Variable knows where its value came from (its guard `source`, if it came from the frame's
arguments or globals) and answers the operations bytecode performs on it: attribute reads,
calls, iteration, truth. What a subclass does not model raises `Unsupported`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.capture.guards.source import Source
from ember.capture.unsupported import Unsupported

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


class Variable:
    """A modelled Python value."""

    source: Source | None = None

    # ---- identity and constants ----------------------------------------------------------

    def python_type(self) -> type:
        raise Unsupported(f"asking the type of {self.describe()}")

    def is_constant(self) -> bool:
        """True for immutable Python values known while capturing (ints, strings, dtypes)."""
        return False

    def constant(self) -> Any:
        raise Unsupported(f"using {self.describe()} as a Python constant")

    def realize(self) -> Any:
        """The value as torch functions take it (tensors are tracing tensors)."""
        raise Unsupported(f"passing {self.describe()} to a torch function")

    def identity(self) -> object:
        """The object `is` compares: by default the Variable itself."""
        return self

    def describe(self) -> str:
        name = f" {self.source.name()}" if self.source is not None else ""
        return f"a {type(self).__name__.removesuffix('Variable').lower()} value{name}"

    # ---- operations ----------------------------------------------------------------------

    def getattr(self, frame: Frame, name: str) -> Variable:
        raise Unsupported(f"reading attribute {name!r} of {self.describe()}")

    def setattr(self, frame: Frame, name: str, value: Variable) -> None:
        raise Unsupported(f"writing attribute {name!r} of {self.describe()}")

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        raise Unsupported(f"calling {self.describe()}")

    def items(self, frame: Frame) -> list[Variable]:
        """The values iteration yields (lists, tuples, dict keys, ranges, ...)."""
        raise Unsupported(f"iterating over {self.describe()}")

    def truth(self, frame: Frame) -> bool:
        raise Unsupported(f"using {self.describe()} as a condition")


class NullVariable(Variable):
    """The NULL that CALL conventions push below a callable."""

    def describe(self) -> str:
        return "NULL"


NULL = NullVariable()
