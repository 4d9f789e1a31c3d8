"""Other Python objects met through a source (configs, plain classes): their instance
attributes are read (and guarded) from the source, and their methods are inlined.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from ember.capture.guards.source import AttrSource, Source
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


class UserObjectVariable(Variable):
    """An instance of a user class, guarded by its type."""

    def __init__(self, value: Any, source: Source | None) -> None:
        self.value = value
        self.source = source

    def python_type(self) -> type:
        return type(self.value)

    def identity(self) -> object:
        return self.value

    def describe(self) -> str:
        name = f" {self.source.name()}" if self.source is not None else ""
        return f"the {type(self.value).__name__} object{name}"

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.builder import wrap, wrap_result
        from ember.capture.variables.functions import BoundMethodVariable, FunctionVariable

        written = frame.session.side_effects.load_attr(self.value, name)
        if written is not None:
            return written
        if name == "__class__":
            return ConstantVariable(type(self.value))
        instance = getattr(self.value, "__dict__", {})
        if name in instance and self.source is not None:
            return wrap(frame, instance[name], AttrSource(self.source, name))
        try:
            static = inspect.getattr_static(type(self.value), name)
        except AttributeError as error:
            raise Unsupported(
                f"reading the missing attribute {name!r} of {self.describe()}"
            ) from error
        if isinstance(static, staticmethod) and inspect.isfunction(static.__func__):
            return FunctionVariable.of(frame, static.__func__, None)
        if isinstance(static, classmethod) and inspect.isfunction(static.__func__):
            receiver = ConstantVariable(type(self.value))
            return BoundMethodVariable(FunctionVariable.of(frame, static.__func__, None), receiver)
        if isinstance(static, property) and inspect.isfunction(static.fget):
            return FunctionVariable.of(frame, static.fget, None).call(frame, [self], {})
        if inspect.isfunction(static):
            return BoundMethodVariable(FunctionVariable.of(frame, static, None), self)
        if inspect.ismethoddescriptor(static) and callable(static) and self.source is not None:
            return OpaqueMethodVariable(self, name)
        return wrap_result(frame, static)

    def python_method(self, frame: Frame, name: str) -> Variable | None:
        """The bound method `name` when the class defines it in Python (`__getitem__` of a
        Mapping subclass, say), to inline; None when it is missing or written in C."""
        from ember.capture.variables.functions import BoundMethodVariable, FunctionVariable

        try:
            static = inspect.getattr_static(type(self.value), name)
        except AttributeError:
            return None
        if not inspect.isfunction(static):
            return None
        return BoundMethodVariable(FunctionVariable.of(frame, static, None), self)

    def setattr(self, frame: Frame, name: str, value: Variable) -> None:
        """Replayed after the graph; a frozen dataclass refuses, as it would in Python."""
        params = getattr(type(self.value), "__dataclass_params__", None)
        if self.source is None or (params is not None and params.frozen):
            super().setattr(frame, name, value)
        frame.session.side_effects.store_attr(self, self.value, name, value)

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        raise Unsupported.of("opaque-call", name=self.describe())


class OpaqueMethodVariable(Variable):
    """A method written in C of an object capture does not model (`ctx_var.set`): calling it
    breaks the graph, and the call runs for real on the object."""

    def __init__(self, owner: UserObjectVariable, name: str) -> None:
        self.owner = owner
        self.name = name

    def describe(self) -> str:
        return f"{type(self.owner.value).__name__}.{self.name}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        raise Unsupported.of("opaque-call", name=self.describe())
