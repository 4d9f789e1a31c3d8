"""Functions: user functions and closures (inlined by interpreting their bytecode), bound
methods, and the cells that closures share.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from ember.capture.guards.source import AttrSource, ItemSource, Source
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame

# Functions marked with ember.capture.disable(); capture refuses to inline them.
DISABLED_CODES: set[types.CodeType] = set()


class CellVariable(Variable):
    """A closure cell. Cells of real functions read their contents lazily, with a source."""

    def __init__(
        self,
        contents: Variable | None = None,
        real: Any = None,
        source: Source | None = None,
    ) -> None:
        self.contents = contents
        self._real = real  # a real cell object whose contents are not wrapped yet
        self.source = source

    def load(self, frame: Frame, name: str) -> Variable:
        if self.contents is None and self._real is not None:
            from ember.capture.variables.builder import wrap, wrap_result

            try:
                value = self._real.cell_contents
            except ValueError as error:
                raise Unsupported(f"reading the unassigned closure variable {name!r}") from error
            self.contents = (
                wrap(frame, value, self.source) if self.source else wrap_result(frame, value)
            )
            self._real = None
        if self.contents is None:
            raise Unsupported(f"reading the unassigned closure variable {name!r}")
        return self.contents

    def store(self, value: Variable) -> None:
        if self._real is not None or self.source is not None:
            raise Unsupported(
                "assigning to a closure variable of a function defined outside the compiled one",
                "return the new value instead",
            )
        self.contents = value


# Function attributes that user code (decorators, introspection) may read.
_READABLE = ("__module__", "__doc__", "__defaults__", "__kwdefaults__", "__wrapped__", "__dict__")


class FunctionVariable(Variable):
    """A Python function: a real one (`fn` set) or one made while capturing (MAKE_FUNCTION)."""

    def __init__(
        self,
        code: types.CodeType,
        globals_dict: dict[str, Any],
        *,
        name: str,
        defaults: list[Variable] | None = None,
        kwdefaults: dict[str, Variable] | None = None,
        closure: list[CellVariable] | None = None,
        fn: types.FunctionType | None = None,
        source: Source | None = None,
    ) -> None:
        self.code = code
        self.globals = globals_dict
        self.name = name
        self.defaults = defaults or []
        self.kwdefaults = kwdefaults or {}
        self.closure = closure or []
        self.fn = fn
        self.source = source

    @staticmethod
    def of(frame: Frame, fn: types.FunctionType, source: Source | None) -> FunctionVariable:
        from ember.capture.variables.builder import wrap_result

        closure: list[CellVariable] = []
        for index, cell in enumerate(fn.__closure__ or ()):
            cell_source = None
            if source is not None:
                cell_source = AttrSource(
                    ItemSource(AttrSource(source, "__closure__"), index), "cell_contents"
                )
            closure.append(CellVariable(real=cell, source=cell_source))
        defaults = [wrap_result(frame, value) for value in fn.__defaults__ or ()]
        kwdefaults = {key: wrap_result(frame, v) for key, v in (fn.__kwdefaults__ or {}).items()}
        return FunctionVariable(
            fn.__code__,
            fn.__globals__,
            name=fn.__qualname__,
            defaults=defaults,
            kwdefaults=kwdefaults,
            closure=closure,
            fn=fn,
            source=source,
        )

    def python_type(self) -> type:
        return types.FunctionType

    def identity(self) -> object:
        return self.fn if self.fn is not None else self

    def describe(self) -> str:
        return f"the function {self.name}"

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.builder import wrap, wrap_result
        from ember.capture.variables.constant import ConstantVariable

        if name in ("__name__", "__qualname__"):
            short = self.name.rsplit(".", 1)[-1]
            return ConstantVariable(short if name == "__name__" else self.name)
        if name == "__code__":
            return ConstantVariable(self.code)
        if self.fn is not None and name in _READABLE and hasattr(self.fn, name):
            value = getattr(self.fn, name)
            if self.source is not None:
                return wrap(frame, value, AttrSource(self.source, name))
            return wrap_result(frame, value)
        return super().getattr(frame, name)

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        if self.code in DISABLED_CODES:
            raise Unsupported.of("disabled-function", name=self.name)
        if self.fn is not None:
            from ember.capture.variables.mapping_mixins import MIXINS

            mixin = MIXINS.get(self.fn)
            if mixin is not None:
                return mixin(frame, args, kwargs)
        return frame.inline(self, args, kwargs)


class BoundMethodVariable(Variable):
    """A function bound to a receiver (`self.helper`, `module.forward`)."""

    def __init__(self, function: Variable, receiver: Variable, source: Source | None = None):
        self.function = function
        self.receiver = receiver
        self.source = source

    def python_type(self) -> type:
        return types.MethodType

    def describe(self) -> str:
        return f"the method {self.function.describe()}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        return self.function.call(frame, [self.receiver, *args], kwargs)
