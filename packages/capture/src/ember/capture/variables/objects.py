"""Other Python objects met through a source (configs, plain classes): their instance
attributes are read (and guarded) from the source, and their methods are inlined.
"""

from __future__ import annotations

import collections.abc
import inspect
import logging
from typing import TYPE_CHECKING, Any

from ember.capture.guards.source import AttrSource, Source
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable, is_constant_value

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
        if isinstance(self.value, logging.Logger) and name in LOG_METHODS and self.source:
            return LogCallVariable(self, name)
        instance = getattr(self.value, "__dict__", {})
        if name in instance and self.source is not None:
            return wrap(frame, instance[name], AttrSource(self.source, name))
        try:
            static = inspect.getattr_static(type(self.value), name)
        except AttributeError as error:
            if self.source is not None and _custom_lookup(type(self.value)):
                # A class whose own __getattribute__/__getattr__ finds it (a transformers
                # config's attribute_map): read for real, guarded on the value found.
                try:
                    found = getattr(self.value, name)
                except AttributeError:
                    pass
                else:
                    return wrap(frame, found, AttrSource(self.source, name))
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
        if (
            inspect.isgetsetdescriptor(static) or inspect.ismemberdescriptor(static)
        ) and self.source is not None:
            # A C-level attribute or a __slots__ entry: read for real, guarded.
            return wrap(frame, getattr(self.value, name), AttrSource(self.source, name))
        if (
            isinstance(self.value, dict)
            and name in ("keys", "values", "items")
            and static in (getattr(dict, name), getattr(collections.OrderedDict, name))
            and self.source is not None
        ):
            return DictSubclassViewVariable(self, name)
        if inspect.ismethoddescriptor(static) and callable(static) and self.source is not None:
            return OpaqueMethodVariable(self, name)
        if self.source is not None and is_constant_value(static) and type(static) is not tuple:
            # A class attribute read through the instance (`seen = False` on the class):
            # guarded where it is read, so an instance attribute written over it later (the
            # first call's `self.seen = True`) or a new class value recompiles.
            return wrap(frame, static, AttrSource(self.source, name))
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

    def length(self, frame: Frame) -> Variable:
        """len(): the class's `__len__`, when written in Python, inlined."""
        method = self.python_method(frame, "__len__")
        if method is None:
            raise Unsupported(f"len() of {self.describe()}")
        return method.call(frame, [], {})

    def items(self, frame: Frame) -> list[Variable]:
        """Iteration by the sequence protocol (`collections.abc.Sequence.__iter__`, or no
        `__iter__` at all): `__getitem__` for each index below `__len__`, both inlined."""
        cls = self.python_type()
        iterate = inspect.getattr_static(cls, "__iter__", None)
        getitem = self.python_method(frame, "__getitem__")
        if iterate not in (None, collections.abc.Sequence.__iter__) or getitem is None:
            raise Unsupported(f"iterating over {self.describe()}")
        count = self.length(frame).constant()
        return [getitem.call(frame, [ConstantVariable(i)], {}) for i in range(count)]

    def truth(self, frame: Frame) -> bool:
        """`if obj:` as Python decides it: `__bool__`, else `__len__`, else true."""
        for name in ("__bool__", "__len__"):
            method = self.python_method(frame, name)
            if method is not None:
                return method.call(frame, [], {}).truth(frame)
            if inspect.getattr_static(self.python_type(), name, None) is not None:
                raise Unsupported(f"using {self.describe()} as a condition")
        return True

    def setattr(self, frame: Frame, name: str, value: Variable) -> None:
        """Replayed after the graph; a frozen dataclass refuses, as it would in Python."""
        params = getattr(type(self.value), "__dataclass_params__", None)
        if self.source is None or (params is not None and params.frozen):
            super().setattr(frame, name, value)
        frame.session.side_effects.store_attr(self, self.value, name, value)

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        raise Unsupported.of("opaque-call", name=self.describe())


# Logger methods replayed after the graph instead of breaking it (their result is None).
LOG_METHODS = frozenset(
    ("debug", "info", "warning", "warn", "error", "critical", "exception", "log")
) | {"warning_once", "info_once", "warning_advice"}  # transformers' additions


class LogCallVariable(Variable):
    """`logger.warning(...)`: recorded as a side effect, replayed after the graph."""

    def __init__(self, owner: UserObjectVariable, name: str) -> None:
        self.owner = owner
        self.name = name

    def describe(self) -> str:
        return f"Logger.{self.name}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        frame.session.side_effects.record_call(self.owner, self.name, list(args), dict(kwargs))
        return ConstantVariable(None)


def _custom_lookup(cls: type) -> bool:
    return any(
        inspect.isfunction(inspect.getattr_static(cls, hook, None))
        for hook in ("__getattribute__", "__getattr__")
    )


class DictSubclassViewVariable(Variable):
    """`keys`, `values` or `items` of a dict subclass read through a source (a ModelOutput
    passed in or kept across a break): its keys are guarded, its entries read as plain
    dict entries, each through its own source."""

    def __init__(self, owner: UserObjectVariable, name: str) -> None:
        self.owner = owner
        self.name = name

    def describe(self) -> str:
        return f"{type(self.owner.value).__name__}.{self.name}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        from ember.capture.guards.kinds import GuardKind
        from ember.capture.guards.source import DictEntrySource
        from ember.capture.variables.builder import wrap
        from ember.capture.variables.containers import ListVariable, mapping_view

        if args or kwargs:
            raise Unsupported(f"calling {self.describe()} with arguments (TypeError)")
        source = self.owner.source
        assert source is not None
        keys = tuple(dict.keys(self.owner.value))
        if not all(isinstance(key, str | int) for key in keys):
            raise Unsupported(f"{self.describe()} of a dict with non-constant keys")
        frame.session.guard(GuardKind.DICT_KEYS, source, keys)
        mapping = self.owner.value
        return ListVariable(
            mapping_view(
                self.name,
                list(keys),
                lambda: [
                    wrap(frame, dict.__getitem__(mapping, key), DictEntrySource(source, key))
                    for key in keys
                ],
            )
        )


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
