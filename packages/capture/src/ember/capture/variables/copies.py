"""`copy.deepcopy` while capturing: constants are themselves, containers of constants are
new containers, and a plain object read through a source (a model config) becomes a
capture-private copy.

The private copy is made for real while capturing, guarded by the original's `__dict__`
(equal to the one copied; its values must be plain constants or containers of them). Nothing
outside the capture can see the copy, so its methods run for real on constant arguments and
attribute writes apply at once; where it outlives the graph, the entry function hands out a
fresh deep copy of its final state, as each eager call makes a new one.
"""

from __future__ import annotations

import copy
import inspect
from typing import TYPE_CHECKING, Any

from ember.capture.guards.kinds import GuardKind
from ember.capture.guards.source import AttrSource
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import is_constant_value
from ember.capture.variables.containers import DictVariable, ListVariable, TupleVariable
from ember.capture.variables.objects import UserObjectVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


def plain(value: Any) -> bool:
    """Constants, and lists, tuples and dicts of them (what `==` compares by value)."""
    if is_constant_value(value):
        return True
    if type(value) in (list, tuple):
        return all(plain(item) for item in value)
    if type(value) is dict:
        return all(is_constant_value(k) and plain(v) for k, v in value.items())
    return False


def deepcopy_variable(frame: Frame, value: Variable) -> Variable:
    """`copy.deepcopy(value)`."""
    from ember.capture.variables.builder import wrap_result

    if value.is_constant():
        return value
    if isinstance(value, (ListVariable, DictVariable, TupleVariable)):
        real = _plain_contents(value)
        return wrap_result(frame, copy.deepcopy(real))
    if type(value) is UserObjectVariable and value.source is not None:
        state = getattr(value.value, "__dict__", None)
        if type(state) is not dict or not plain(state):
            raise Unsupported(f"copy.deepcopy() of {value.describe()}, which holds non-constants")
        frame.session.guard(GuardKind.CONSTANT, AttrSource(value.source, "__dict__"), dict(state))
        return PrivateObjectVariable(copy.deepcopy(value.value))
    if isinstance(value, PrivateObjectVariable):
        return PrivateObjectVariable(copy.deepcopy(value.value))
    raise Unsupported(f"copy.deepcopy() of {value.describe()}")


def _plain_contents(value: Variable) -> Any:
    if value.is_constant():
        return value.constant()
    if isinstance(value, ListVariable):
        return [_plain_contents(item) for item in value.values]
    if isinstance(value, TupleVariable) and value.tuple_type is tuple:
        return tuple(_plain_contents(item) for item in value.values)
    if isinstance(value, DictVariable):
        return {key: _plain_contents(item) for key, item in value.entries.items()}
    raise Unsupported(f"copy.deepcopy() of {value.describe()}")


class PrivateObjectVariable(UserObjectVariable):
    """A real object only this capture can see (a deep copy made while capturing)."""

    def __init__(self, value: Any) -> None:
        super().__init__(value, None)

    def describe(self) -> str:
        return f"a copy of a {type(self.value).__name__} object"

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.builder import wrap_result
        from ember.capture.variables.functions import FunctionVariable

        static = inspect.getattr_static(type(self.value), name, None)
        if inspect.isfunction(static):
            return PrivateMethodVariable(self, name)
        if isinstance(static, property) and inspect.isfunction(static.fget):
            return FunctionVariable.of(frame, static.fget, None).call(frame, [self], {})
        try:
            found = getattr(self.value, name)
        except AttributeError as error:
            raise Unsupported(f"reading a missing attribute ({error})") from error
        if callable(found) and not isinstance(found, type):
            return PrivateMethodVariable(self, name)
        return wrap_result(frame, found)

    def setattr(self, frame: Frame, name: str, value: Variable) -> None:
        real = _plain_contents(value)
        setattr(self.value, name, copy.deepcopy(real))

    def delattr(self, name: str) -> None:
        try:
            delattr(self.value, name)
        except AttributeError as error:
            raise Unsupported(f"deleting a missing attribute ({error})") from error

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        raise Unsupported(f"calling {self.describe()}")


class PrivateMethodVariable(Variable):
    """A method of a private object: run for real on constant arguments."""

    def __init__(self, owner: PrivateObjectVariable, name: str) -> None:
        self.owner = owner
        self.name = name

    def describe(self) -> str:
        return f"{type(self.owner.value).__name__}.{self.name} of a private copy"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        from ember.capture.variables.builder import wrap_result

        real_args = [_plain_contents(arg) for arg in args]
        real_kwargs = {key: _plain_contents(arg) for key, arg in kwargs.items()}
        result = getattr(self.owner.value, self.name)(*real_args, **real_kwargs)
        if not plain(result) and result is not self.owner.value:
            raise Unsupported(f"{self.describe()} returned a {type(result).__name__}")
        if result is self.owner.value:
            return self.owner
        return wrap_result(frame, copy.deepcopy(result))
