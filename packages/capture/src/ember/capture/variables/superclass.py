"""`super()`: attribute lookup that starts after a class in the receiver's MRO.

Zero-argument `super()` reads the function's `__class__` cell and first argument, as
CPython does; methods found are inlined like any other, bound to the receiver.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.builtins import BUILTINS
from ember.capture.variables.constant import ConstantVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


class SuperVariable(Variable):
    """`super(cls, receiver)`."""

    def __init__(self, cls: type, receiver: Variable) -> None:
        self.cls = cls
        self.receiver = receiver

    def python_type(self) -> type:
        return super

    def describe(self) -> str:
        return f"super({self.cls.__name__})"

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.builder import wrap_result
        from ember.capture.variables.functions import BoundMethodVariable, FunctionVariable

        owner = self.receiver.python_type()
        mro = owner.__mro__ if isinstance(owner, type) else ()
        if self.cls not in mro:
            raise Unsupported(f"super() of {self.receiver.describe()} outside its class")
        for klass in mro[mro.index(self.cls) + 1 :]:
            if name not in vars(klass):
                continue
            found = vars(klass)[name]
            if isinstance(found, staticmethod) and inspect.isfunction(found.__func__):
                return FunctionVariable.of(frame, found.__func__, None)
            if isinstance(found, classmethod) and inspect.isfunction(found.__func__):
                function = FunctionVariable.of(frame, found.__func__, None)
                return BoundMethodVariable(function, ConstantVariable(owner))
            if isinstance(found, property) and inspect.isfunction(found.fget):
                return FunctionVariable.of(frame, found.fget, None).call(frame, [self.receiver], {})
            if inspect.isfunction(found):
                return BoundMethodVariable(FunctionVariable.of(frame, found, None), self.receiver)
            if klass is dict and name in _DICT_READS and self.receiver.source is not None:
                return DictReadVariable(self.receiver, name)
            return wrap_result(frame, found)
        raise Unsupported(f"super().{name}: no base class of {owner.__name__} defines it")


_DICT_READS = ("get", "__getitem__", "__contains__")


class DictReadVariable(Variable):
    """`dict.get` / `__getitem__` / `__contains__` of a dict subclass reached through
    `super()`: the entry is read for real, with a guard on it (`DictEntrySource`)."""

    def __init__(self, receiver: Variable, name: str) -> None:
        self.receiver = receiver
        self.name = name

    def describe(self) -> str:
        return f"dict.{self.name} of {self.receiver.describe()}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        from ember.capture.guards.kinds import GuardKind
        from ember.capture.guards.source import MISSING, DictEntrySource
        from ember.capture.variables.builder import wrap

        assert self.receiver.source is not None
        if kwargs or not args or not args[0].is_constant():
            raise Unsupported(f"calling {self.describe()} with a non-constant key")
        key = args[0].constant()
        source = DictEntrySource(self.receiver.source, key)
        value = dict.get(self.receiver.identity(), key, MISSING)  # type: ignore[call-overload]
        if value is MISSING:
            frame.session.guard(GuardKind.ID, source, MISSING)
            if self.name == "__contains__":
                return ConstantVariable(False)
            if self.name == "get":
                return args[1] if len(args) > 1 else ConstantVariable(None)
            raise Unsupported(f"a missing key {key!r} (KeyError)")
        found = wrap(frame, value, source)
        if self.name == "__contains__":
            frame.session.guard(GuardKind.TYPE, source, type(value))
            return ConstantVariable(True)
        return found


def _super(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    if len(args) == 2:
        return SuperVariable(args[0].constant(), args[1])
    if args or "__class__" not in frame.cells or not frame.code.co_argcount:
        raise Unsupported("super() outside a method")
    cls = frame.cells["__class__"].load(frame, "__class__").constant()
    return SuperVariable(cls, frame.load_local(frame.code.co_varnames[0]))


BUILTINS[super] = _super
