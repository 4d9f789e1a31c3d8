"""Objects of user classes created inside the compiled function (`DynamicCache(config=...)`).

As under torch.compile, the object exists only as a Variable while capturing: `__init__` and
its other methods are inlined with the Variable as `self`, attribute writes change the
Variable's attribute table, and nothing runs for real. When the object outlives the graph
(returned, kept across a break, written somewhere) the entry function rebuilds it after the
graph: `cls.__new__(cls)` and its final attributes, set with `object.__setattr__`, once per
object so aliases stay one object. No guard is needed on an object that did not exist before
the call; its class is guarded where it was read.
"""

from __future__ import annotations

import abc
import inspect
from typing import TYPE_CHECKING, Any

from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable
from ember.capture.variables.objects import UserObjectVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


def can_construct(cls: type) -> bool:
    """True for plain Python classes: `object.__new__`, the default `__setattr__` and a
    Python (or no) `__init__`; not builtins' subclasses, modules or exceptions."""
    if type(cls) not in (type, abc.ABCMeta):
        return False
    if inspect.getattr_static(cls, "__new__", None) is not object.__new__:
        return False
    if inspect.getattr_static(cls, "__setattr__", None) is not object.__setattr__:
        return False
    if inspect.getattr_static(cls, "__getattribute__", None) is not object.__getattribute__:
        return False
    if any(vars(klass).get("__slots__", ()) for klass in cls.__mro__[:-1]):
        return False  # empty __slots__ (collections.abc's bases) leave a __dict__
    init = inspect.getattr_static(cls, "__init__", None)
    return init is object.__init__ or inspect.isfunction(init)


def construct(
    frame: Frame, cls: type, args: list[Variable], kwargs: dict[str, Variable]
) -> NewObjectVariable:
    """`cls(*args, **kwargs)`: a new object whose `__init__` is inlined."""
    from ember.capture.variables.functions import FunctionVariable

    created = NewObjectVariable(cls)
    init = inspect.getattr_static(cls, "__init__")
    if init is object.__init__:
        if args or kwargs:
            raise Unsupported(f"constructing {cls.__name__} with arguments (TypeError)")
        return created
    result = FunctionVariable.of(frame, init, None).call(frame, [created, *args], kwargs)
    if not (result.is_constant() and result.constant() is None):
        raise Unsupported(f"{cls.__name__}.__init__ returned a value (TypeError)")
    return created


def build_new_object(cls: type, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
    """What the entry function calls to rebuild a NewObjectVariable after the graph."""
    created: Any = object.__new__(cls)  # can_construct: the class's __new__ is object's
    for name, value in zip(names, values):
        object.__setattr__(created, name, value)
    return created


class NewObjectVariable(UserObjectVariable):
    """An object made while capturing: its class and its attributes, as Variables."""

    def __init__(self, cls: type) -> None:
        super().__init__(None, None)
        self.cls = cls
        self.attributes: dict[str, Variable] = {}

    def python_type(self) -> type:
        return self.cls

    def identity(self) -> object:
        return self

    def describe(self) -> str:
        return f"the new {self.cls.__name__} object"

    def has_attribute(self, name: str) -> bool:
        """hasattr(): instance attributes, then the class (without calling __getattr__)."""
        return name in self.attributes or inspect.getattr_static(self.cls, name, None) is not None

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.builder import wrap_result
        from ember.capture.variables.functions import BoundMethodVariable, FunctionVariable

        found = self.attributes.get(name)
        if found is not None:
            return found
        if name == "__class__":
            return ConstantVariable(self.cls)
        try:
            static = inspect.getattr_static(self.cls, name)
        except AttributeError:
            fallback = self.python_method(frame, "__getattr__")
            if fallback is None:
                raise Unsupported(
                    f"reading the missing attribute {name!r} of {self.describe()} (AttributeError)"
                ) from None
            return fallback.call(frame, [ConstantVariable(name)], {})
        if isinstance(static, staticmethod) and inspect.isfunction(static.__func__):
            return FunctionVariable.of(frame, static.__func__, None)
        if isinstance(static, classmethod) and inspect.isfunction(static.__func__):
            receiver = ConstantVariable(self.cls)
            return BoundMethodVariable(FunctionVariable.of(frame, static.__func__, None), receiver)
        if isinstance(static, property) and inspect.isfunction(static.fget):
            return FunctionVariable.of(frame, static.fget, None).call(frame, [self], {})
        if inspect.isfunction(static):
            return BoundMethodVariable(FunctionVariable.of(frame, static, None), self)
        return wrap_result(frame, static)

    def python_method(self, frame: Frame, name: str) -> Variable | None:
        from ember.capture.variables.functions import BoundMethodVariable, FunctionVariable

        static = inspect.getattr_static(self.cls, name, None)
        if not inspect.isfunction(static):
            return None
        return BoundMethodVariable(FunctionVariable.of(frame, static, None), self)

    def setattr(self, frame: Frame, name: str, value: Variable) -> None:
        static = inspect.getattr_static(self.cls, name, None)
        if isinstance(static, property) or inspect.isdatadescriptor(static):
            raise Unsupported(f"assigning the descriptor {name!r} of {self.describe()}")
        self.attributes[name] = value

    def delattr(self, name: str) -> None:
        if self.attributes.pop(name, None) is None:
            raise Unsupported(f"deleting the missing attribute {name!r} (AttributeError)")

    def truth(self, frame: Frame) -> bool:
        for name in ("__bool__", "__len__"):
            method = self.python_method(frame, name)
            if method is not None:
                return method.call(frame, [], {}).truth(frame)
        return True

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        method = self.python_method(frame, "__call__")
        if method is None:
            raise Unsupported(f"calling {self.describe()} (TypeError)")
        return method.call(frame, args, kwargs)


def stateless_module(
    frame: Frame, cls: type, args: list[Variable], kwargs: dict[str, Variable]
) -> Variable | None:
    """`nn.CrossEntropyLoss(ignore_index=-100)` and other torch.nn modules without parameters
    or buffers, built from constants: built once, while capturing, and used on every call (it
    holds nothing a call could change); None for anything else."""
    from torch import nn

    from ember.capture.guards.source import GlobalSource
    from ember.capture.variables.modules import ModuleVariable

    if not (issubclass(cls, nn.Module) and cls.__module__.startswith("torch.nn.modules.")):
        return None
    if not all(value.is_constant() for value in [*args, *kwargs.values()]):
        return None
    key = (cls, tuple(a.constant() for a in args), tuple(sorted(kwargs)))
    key += tuple(kwargs[name].constant() for name in sorted(kwargs))
    try:
        module = _STATELESS.get(key)
    except TypeError:  # an unhashable constant
        return None
    if module is None:
        module = cls(*key[1], **{name: kwargs[name].constant() for name in kwargs})
        if next(module.parameters(), None) is not None or next(module.buffers(), None) is not None:
            return None
        _STATELESS[key] = module
        globals()[f"_stateless_{len(_STATELESS)}"] = module
    index = list(_STATELESS).index(key) + 1
    source = GlobalSource(f"_stateless_{index}", __name__)
    return ModuleVariable(module, source)  # always this module: no guard needed


# torch.nn modules built while capturing, by class and arguments (see stateless_module).
_STATELESS: dict[tuple[Any, ...], Any] = {}
