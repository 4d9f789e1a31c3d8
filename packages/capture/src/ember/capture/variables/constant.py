"""Constants: immutable Python values known while capturing (numbers, strings, None, dtypes,
devices, torch.Size, slices, ranges, classes). Their operations run for real.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from ember.capture.guards.source import Source
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame

CONSTANT_TYPES: tuple[type, ...] = (
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type(None),
    type(Ellipsis),
    type(NotImplemented),
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    torch.Size,
    torch.finfo,
    torch.iinfo,
    slice,
    range,
    inspect.Signature,
    inspect.Parameter,
    # sizes of symbolic dims and what is computed from them; their operations run for real
    # on ember-prims' SymNodes, which record every decision as a size guard
    torch.SymInt,
    torch.SymFloat,
    torch.SymBool,
)


def is_constant_value(value: Any) -> bool:
    """True when `value` (recursively, for tuples) is an immutable constant."""
    if type(value) is tuple or type(value) is frozenset:
        return all(is_constant_value(item) for item in value)
    if isinstance(value, slice):
        return all(is_constant_value(p) for p in (value.start, value.stop, value.step))
    return isinstance(value, CONSTANT_TYPES)


_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def concrete_value(value: Any) -> Any:
    """`value` with each symbolic size (a SymInt of a dim the Graph keeps symbolic, or what
    Python computed from one) replaced by its value in this capture, which records the
    guard that makes it right: for values that leave the Graph or become text
    (`str(SymInt)` would print the symbol's name)."""
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, torch.Size):
        return torch.Size(concrete_value(size) for size in value)
    if type(value) is tuple:
        return tuple(concrete_value(item) for item in value)
    if isinstance(value, slice):
        return slice(*(concrete_value(p) for p in (value.start, value.stop, value.step)))
    return value


class ConstantVariable(Variable):
    """An immutable Python value."""

    def __init__(self, value: Any, source: Source | None = None) -> None:
        self.value = value
        self.source = source

    def python_type(self) -> type:
        return type(self.value)

    def is_constant(self) -> bool:
        return True

    def constant(self) -> Any:
        return self.value

    def realize(self) -> Any:
        return self.value

    def identity(self) -> object:
        return self.value

    def describe(self) -> str:
        return repr(self.value)

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.autograd_function import (
            FunctionApplyVariable,
            is_function_apply,
        )
        from ember.capture.variables.builder import wrap_result

        if is_function_apply(self.value, name):
            return FunctionApplyVariable(self.value)
        try:
            attribute = getattr(self.value, name)
        except AttributeError as error:
            raise Unsupported(f"reading a missing attribute ({error})") from error
        if isinstance(attribute, types.MappingProxyType) and isinstance(
            self.value, inspect.Signature
        ):
            return ConstantVariable(attribute)  # Signature.parameters: read-only Parameters
        if callable(attribute) and not isinstance(attribute, type):
            from ember.capture.variables.builtins import BuiltinVariable

            return BuiltinVariable(attribute)  # a method of an immutable value runs for real
        return wrap_result(frame, attribute)

    def items(self, frame: Frame) -> list[Variable]:
        try:
            values = list(self.value)
        except TypeError as error:
            raise Unsupported(f"iterating over {self.describe()}") from error
        return [ConstantVariable(item) for item in values]

    def truth(self, frame: Frame) -> bool:
        return bool(self.value)

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        from ember.capture.variables.builder import wrap_result

        if self.value in (torch.Size, torch.device, torch.dtype, slice, range):
            real_args = [arg.realize() for arg in args]
            real_kwargs = {key: arg.realize() for key, arg in kwargs.items()}
            return wrap_result(frame, self.value(*real_args, **real_kwargs))
        if isinstance(self.value, type) and dataclasses.is_dataclass(self.value):
            from ember.capture.variables.dataclass_objects import DataclassVariable

            return DataclassVariable.construct(self.value, args, kwargs)
        if isinstance(self.value, type) and issubclass(self.value, BaseException) and not kwargs:
            return ExceptionVariable(self.value, args)
        fields = getattr(self.value, "_fields", None)
        if isinstance(self.value, type) and issubclass(self.value, tuple) and fields is not None:
            return _make_namedtuple(self.value, fields, args, kwargs)
        if self.value in (torch.finfo, torch.iinfo):
            # Immutable facts about a dtype: a constant, as under torch.compile.
            real_args = [arg.constant() for arg in args]
            real_kwargs = {key: arg.constant() for key, arg in kwargs.items()}
            return ConstantVariable(self.value(*real_args, **real_kwargs))
        if isinstance(self.value, type):
            from ember.capture.variables import new_objects

            if new_objects.can_construct(self.value):
                return new_objects.construct(frame, self.value, args, kwargs)
            stateless = new_objects.stateless_module(frame, self.value, args, kwargs)
            if stateless is not None:
                return stateless
            raise Unsupported.of("object-construction", name=self.value.__qualname__)
        raise Unsupported(f"calling {self.describe()}")


def _make_namedtuple(
    cls: type, fields: tuple[str, ...], args: list[Variable], kwargs: dict[str, Variable]
) -> Variable:
    from ember.capture.variables.containers import TupleVariable

    values: dict[str, Variable] = dict(zip(fields, args))
    values.update(kwargs)
    defaults = getattr(cls, "_field_defaults", {})
    missing = [name for name in fields if name not in values and name not in defaults]
    if missing or len(args) > len(fields):
        raise Unsupported(f"constructing {cls.__name__} with the wrong arguments (TypeError)")
    items = [
        values[name] if name in values else ConstantVariable(defaults[name]) for name in fields
    ]
    return TupleVariable(items, None, cls)


class ExceptionVariable(Variable):
    """An exception object made to be raised (`raise ValueError("...")`): raising it breaks
    the graph, and the generated code builds and raises the real one."""

    def __init__(self, cls: type, args: list[Variable]) -> None:
        self.cls = cls
        self.args = args

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        return f"a {self.cls.__name__} exception"
