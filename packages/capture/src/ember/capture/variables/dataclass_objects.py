"""Dataclass instances built inside the compiled function (model outputs such as
transformers' `ModelOutput`): fields are Variables; the object itself is constructed for real
by the generated entry function, from the rebuilt field values.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any

from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable, is_constant_value

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


class DataclassVariable(Variable):
    """A dataclass instance made while capturing; read-only (field writes are issue 5)."""

    def __init__(self, cls: type, fields: dict[str, Variable]) -> None:
        self.cls = cls
        self.fields = fields

    @staticmethod
    def construct(
        cls: type, args: list[Variable], kwargs: dict[str, Variable]
    ) -> DataclassVariable:
        init_fields = [f for f in dataclasses.fields(cls) if f.init]
        if len(args) > len(init_fields):
            raise Unsupported(f"constructing {cls.__name__} with too many arguments (TypeError)")
        values: dict[str, Variable] = {f.name: a for f, a in zip(init_fields, args)}
        for name, value in kwargs.items():
            if name in values or name not in {f.name for f in init_fields}:
                raise Unsupported(f"constructing {cls.__name__} with argument {name!r} (TypeError)")
            values[name] = value
        for field in init_fields:
            if field.name in values:
                continue
            if field.default is not dataclasses.MISSING and is_constant_value(field.default):
                values[field.name] = ConstantVariable(field.default)
            else:
                raise Unsupported(f"constructing {cls.__name__} without field {field.name!r}")
        return DataclassVariable(cls, values)

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        return f"a {self.cls.__name__} object"

    def getattr(self, frame: Frame, name: str) -> Variable:
        if name in self.fields:
            return self.fields[name]
        if issubclass(self.cls, dict) and name in ("keys", "values", "items"):
            return MappingViewMethod(self, name)
        from ember.capture.variables.builder import wrap_result
        from ember.capture.variables.functions import BoundMethodVariable, FunctionVariable

        static = inspect.getattr_static(self.cls, name, None)
        if inspect.isfunction(static):  # ModelOutput.to_tuple and other Python methods
            return BoundMethodVariable(FunctionVariable.of(frame, static, None), self)
        if isinstance(static, property) and inspect.isfunction(static.fget):
            return FunctionVariable.of(frame, static.fget, None).call(frame, [self], {})
        if static is not None and is_constant_value(static):
            return wrap_result(frame, static)
        raise Unsupported(f"reading {self.cls.__name__}.{name}")

    def present_items(self) -> list[tuple[str, Variable]]:
        """(name, value) of the fields that are not None, in order (a ModelOutput's keys)."""
        return [
            (k, v) for k, v in self.fields.items() if not (v.is_constant() and v.constant() is None)
        ]

    def setattr(self, frame: Frame, name: str, value: Variable) -> None:
        params = getattr(self.cls, "__dataclass_params__", None)
        if params is not None and params.frozen:
            raise Unsupported(f"assigning {self.cls.__name__}.{name} of a frozen dataclass")
        self.fields[name] = value

    def present(self) -> list[Variable]:
        """Fields that are not None, in order (what a ModelOutput's items and indexing see)."""
        return [v for v in self.fields.values() if not (v.is_constant() and v.constant() is None)]

    def getitem(self, frame: Frame, index: Variable) -> Variable:
        if not issubclass(self.cls, dict):
            raise Unsupported(f"indexing {self.describe()}")
        key: Any = index.constant()
        if isinstance(key, str):
            return self.getattr(frame, key)
        return self.present()[key]


class MappingViewMethod(Variable):
    """`keys`, `values` or `items` of a dict-subclass dataclass (transformers' ModelOutput,
    whose entries are its fields that are not None)."""

    def __init__(self, owner: DataclassVariable, name: str) -> None:
        self.owner = owner
        self.name = name

    def describe(self) -> str:
        return f"{self.owner.cls.__name__}.{self.name}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        from ember.capture.variables.containers import ListVariable, mapping_view

        if args or kwargs:
            raise Unsupported(f"calling {self.describe()} with arguments (TypeError)")
        entries = self.owner.present_items()
        keys = [key for key, _ in entries]
        return ListVariable(mapping_view(self.name, keys, lambda: [v for _, v in entries]))
