"""`os.environ`: reads of the process environment become constants guarded on the entry.

`os.environ.get(key, default)`, `os.environ[key]` and `key in os.environ` read the entry for
real while capturing and guard on its raw value in `os.environ._data` (or on its absence), so
a missing key costs no graph break (in Python, `Mapping.get` catches the `KeyError` that
`_Environ.__getitem__` raises) and a changed variable recompiles, as under torch.compile.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ember.capture.guards.kinds import GuardKind
from ember.capture.guards.source import MISSING, AttrSource, DictEntrySource
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable
from ember.capture.variables.objects import UserObjectVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame

_READS = ("get", "__getitem__", "__contains__")


class EnvironVariable(UserObjectVariable):
    """`os.environ`, read through a source."""

    def getattr(self, frame: Frame, name: str) -> Variable:
        if name in _READS:
            return EnvironReadVariable(self, name)
        return super().getattr(frame, name)

    def python_method(self, frame: Frame, name: str) -> Variable | None:
        if name in _READS:
            return EnvironReadVariable(self, name)
        return super().python_method(frame, name)


class EnvironReadVariable(Variable):
    """One of `os.environ`'s read methods."""

    def __init__(self, owner: EnvironVariable, name: str) -> None:
        self.owner = owner
        self.name = name

    def describe(self) -> str:
        return f"os.environ.{self.name}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        if kwargs or not args or len(args) > 2 or not args[0].is_constant():
            raise Unsupported(f"calling {self.describe()} with a non-constant key")
        key = args[0].constant()
        if not isinstance(key, str):
            raise Unsupported(f"{self.describe()} of a non-string key (TypeError)")
        assert self.owner.source is not None
        encoded = os.environ.encodekey(key)
        source = DictEntrySource(AttrSource(self.owner.source, "_data"), encoded)
        raw = vars(os.environ)["_data"].get(encoded, MISSING)
        if raw is MISSING:
            frame.session.guard(GuardKind.ID, source, MISSING)
            if self.name == "__contains__":
                return ConstantVariable(False)
            if self.name == "get":
                return args[1] if len(args) > 1 else ConstantVariable(None)
            raise Unsupported(f"reading the missing environment variable {key!r} (KeyError)")
        frame.session.guard(GuardKind.CONSTANT, source, raw)
        if self.name == "__contains__":
            return ConstantVariable(True)
        return ConstantVariable(os.environ.decodevalue(raw))
