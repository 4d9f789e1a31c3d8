"""`collections.abc.Mapping`'s `get` and `__contains__` mixins, which catch the `KeyError`
that the class's own `__getitem__` raises for a missing key.

Capture does not model exceptions raised and caught inside inlined code, so these two are
modelled directly: `__getitem__` is inlined, and where it would raise KeyError (a missing key
of a dict read through a source, guarded on its keys) the mixin's answer is the default, or
False, as Python's would be (transformers' `AttentionInterface.get`).
"""

from __future__ import annotations

import collections.abc
from collections.abc import Callable
from typing import TYPE_CHECKING

from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame

Mixin = Callable[["Frame", list[Variable], dict[str, Variable]], Variable]


def _lookup(frame: Frame, mapping: Variable, key: Variable) -> Variable | None:
    """`mapping[key]`, or None where it raises KeyError."""
    from ember.capture.variables.operators import getitem

    try:
        return getitem(frame, mapping, key)
    except Unsupported as error:
        if error.construct.endswith("(KeyError)"):
            return None
        raise


def _get(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    if kwargs or len(args) not in (2, 3):
        raise Unsupported("Mapping.get() with keyword arguments (TypeError)")
    found = _lookup(frame, args[0], args[1])
    if found is not None:
        return found
    return args[2] if len(args) == 3 else ConstantVariable(None)


def _contains(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    if kwargs or len(args) != 2:
        raise Unsupported("Mapping.__contains__() with the wrong arguments (TypeError)")
    return ConstantVariable(_lookup(frame, args[0], args[1]) is not None)


MIXINS: dict[object, Mixin] = {
    collections.abc.Mapping.get: _get,
    collections.abc.Mapping.__contains__: _contains,
}
