"""nn.Module instances and the containers `Sequential`, `ModuleList` and `ModuleDict`.

Attribute reads go through the module's parameters, buffers, submodules and `__dict__`
(each read from a source, so parameters become Graph inputs and constants get guards).
Calling a user module inlines its `forward`; calling one of torch.nn's own leaf modules runs
it on tracing tensors, with its parameters and buffers swapped for their Graph inputs.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ember.capture.distributed.wrappers import is_wrapper
from ember.capture.guards.kinds import GuardKind
from ember.capture.guards.source import AttrSource, ModuleEntrySource, Source
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable
from ember.capture.variables.containers import ListVariable, TupleVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


class ModuleVariable(Variable):
    """An nn.Module reached through a source (so its state can be read each call)."""

    def __init__(self, module: nn.Module, source: Source | None) -> None:
        self.module = module
        self.source = source

    def python_type(self) -> type:
        return type(self.module)

    def identity(self) -> object:
        return self.module

    def realize(self) -> Any:
        return self.module

    def describe(self) -> str:
        name = self.source.name() if self.source is not None else "?"
        return f"the module {name} ({type(self.module).__name__})"

    def _child_source(self, name: str, table: str | None = None) -> Source:
        """The source of attribute `name`; `table` names the module table holding it."""
        if self.source is None:
            raise Unsupported(f"a module ({type(self.module).__name__}) without an attribute path")
        if table is not None:
            return ModuleEntrySource(self.source, table, name)
        return AttrSource(self.source, name)

    def child(self, frame: Frame, name: str) -> ModuleVariable:
        from ember.capture.variables.builder import wrap

        variable = wrap(frame, self.module._modules[name], self._child_source(name, "_modules"))
        assert isinstance(variable, ModuleVariable)
        return variable

    # ---- attributes ----------------------------------------------------------------------

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.builder import wrap, wrap_result
        from ember.capture.variables.functions import BoundMethodVariable, FunctionVariable

        module = self.module
        written = frame.session.side_effects.load_attr(module, name)
        if written is not None:
            return written
        if name == "__class__":
            return ConstantVariable(type(module))
        if name == "training":
            frame.session.guard(GuardKind.TRAINING, self._child_source(name), module.training)
            return ConstantVariable(module.training)
        for table in ("_parameters", "_buffers", "_modules"):
            entries = module.__dict__.get(table, {})
            if name in entries:
                if entries[name] is None:
                    return ConstantVariable(None)
                return wrap(frame, entries[name], self._child_source(name, table))
        if name in module.__dict__:
            return wrap(frame, module.__dict__[name], self._child_source(name))
        if isinstance(module, nn.ModuleDict) and name in ("keys", "values", "items"):
            return _ModuleDictMethod(self, name)
        if name in ("children", "named_children") and self.source is not None:
            return _ModuleChildren(self, name)
        try:
            static = inspect.getattr_static(type(module), name)
        except AttributeError as error:
            raise Unsupported(
                f"reading the missing attribute {name!r} of {self.describe()}"
            ) from error
        if isinstance(static, staticmethod) and inspect.isfunction(static.__func__):
            return FunctionVariable.of(frame, static.__func__, None)
        if isinstance(static, classmethod) and inspect.isfunction(static.__func__):
            cls = ConstantVariable(type(module))
            return BoundMethodVariable(FunctionVariable.of(frame, static.__func__, None), cls)
        if isinstance(static, property) and inspect.isfunction(static.fget):
            return FunctionVariable.of(frame, static.fget, None).call(frame, [self], {})
        if inspect.isfunction(static):
            if static.__module__.startswith("torch.nn.modules.module"):
                raise Unsupported(f"calling nn.Module.{name} inside a compiled function")
            return BoundMethodVariable(FunctionVariable.of(frame, static, None), self)
        return wrap_result(frame, static)

    def setattr(self, frame: Frame, name: str, value: Variable) -> None:
        """Replayed after the graph by setattr (a tensor assigned to a buffer updates it)."""
        if self.source is None or name == "training":
            super().setattr(frame, name, value)
        frame.session.side_effects.store_attr(self, self.module, name, value)

    # ---- containers ----------------------------------------------------------------------

    def items(self, frame: Frame) -> list[Variable]:
        if isinstance(self.module, nn.ModuleDict):
            self._guard_names(frame)
            return [ConstantVariable(key) for key in self.module._modules]
        if isinstance(self.module, (nn.Sequential, nn.ModuleList)):
            self._guard_names(frame)
            return [self.child(frame, name) for name in self.module._modules]
        raise Unsupported(f"iterating over {self.describe()}")

    def getitem(self, frame: Frame, index: Variable) -> Variable:
        key = index.constant()
        names = list(self.module._modules)
        if isinstance(self.module, nn.ModuleDict):
            return self.child(frame, key)
        if isinstance(key, slice):
            self._guard_names(frame)
            return ListVariable([self.child(frame, name) for name in names[key]])
        if isinstance(key, int) and isinstance(self.module, (nn.Sequential, nn.ModuleList)):
            if not 0 <= key < len(names) or names[key] != str(key):  # `[-1]`, after a `del`
                self._guard_names(frame)
            return self.child(frame, names[key])
        raise Unsupported(f"indexing {self.describe()} with {key!r}")

    def _guard_names(self, frame: Frame) -> None:
        """Guard the names in the container's `_modules` table, which decide what iterating
        or slicing it yields: a ModuleList appended to after the capture recompiles."""
        if self.source is not None:
            frame.session.guard(
                GuardKind.DICT_KEYS,
                AttrSource(self.source, "_modules"),
                tuple(self.module._modules),
            )

    def length(self) -> int:
        if isinstance(self.module, _CONTAINERS):
            return len(self.module._modules)
        raise Unsupported(f"len() of {self.describe()}")

    # ---- calls ---------------------------------------------------------------------------

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        from ember.capture.variables.builder import wrap_result
        from ember.capture.variables.functions import FunctionVariable
        from ember.capture.variables.torch import call_traced

        module = self.module
        if is_wrapper(module):
            raise Unsupported(
                f"calling {self.describe()}, a torch.distributed wrapper",
                "its communication runs in plain Python and its wrapped module is compiled "
                "on its own; nothing to change",
            )
        _check_no_hooks(module, self.describe())
        frame.session.guard(GuardKind.TRAINING, self._child_source("training"), module.training)
        if isinstance(module, nn.Sequential) and type(module).forward is nn.Sequential.forward:
            (value,) = args
            for child in self.items(frame):
                value = child.call(frame, [value], {})
            return value
        if isinstance(module, torch.jit.ScriptModule):
            # its forward is TorchScript, which would run on the tracing tensors' absent data
            raise Unsupported(
                f"calling {self.describe()}, a TorchScript module",
                "capture cannot trace into TorchScript; the module runs eagerly between two "
                "graphs. Call the Python module (before torch.jit.script) to compile it whole",
            )
        forward = type(module).forward
        if _is_torch_leaf(module):
            real_args = [arg.realize() for arg in args]
            real_kwargs = {key: arg.realize() for key, arg in kwargs.items()}
            rebound = _rebound(frame, self)
            result = call_traced(frame, lambda: forward(rebound, *real_args, **real_kwargs))
            return wrap_result(frame, result)
        if not inspect.isfunction(forward):
            raise Unsupported(f"calling {self.describe()}, whose forward is not a Python function")
        function = FunctionVariable.of(frame, forward, None)
        return function.call(frame, [self, *args], kwargs)


class _ModuleDictMethod(Variable):
    """`keys`, `values` or `items` of an nn.ModuleDict."""

    def __init__(self, owner: ModuleVariable, name: str) -> None:
        self.owner = owner
        self.name = name

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        names = list(self.owner.module._modules)
        if self.name == "keys":
            return ListVariable([ConstantVariable(name) for name in names])
        children = [self.owner.child(frame, name) for name in names]
        if self.name == "values":
            return ListVariable(list(children))
        return ListVariable(
            [TupleVariable([ConstantVariable(n), c]) for n, c in zip(names, children)]
        )


class _ModuleChildren(Variable):
    """`children()` or `named_children()` of a module: its submodules in order (guarded on
    the names in its `_modules` table), skipping None entries and repeats, as torch does."""

    def __init__(self, owner: ModuleVariable, name: str) -> None:
        self.owner = owner
        self.name = name

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        from ember.capture.variables.containers import IteratorVariable

        if args or kwargs:
            raise Unsupported(f"calling nn.Module.{self.name} with arguments")
        assert self.owner.source is not None
        table = self.owner.module._modules
        frame.session.guard(
            GuardKind.DICT_KEYS, AttrSource(self.owner.source, "_modules"), tuple(table)
        )
        seen: set[int] = set()
        found: list[Variable] = []
        for name, child in table.items():
            if child is None or id(child) in seen:
                continue
            seen.add(id(child))
            variable = self.owner.child(frame, name)
            if self.name == "named_children":
                found.append(TupleVariable([ConstantVariable(name), variable]))
            else:
                found.append(variable)
        return IteratorVariable(found)


def _is_torch_leaf(module: nn.Module) -> bool:
    cls_module = type(module).__module__
    return cls_module.startswith("torch.nn.") and not isinstance(module, _CONTAINERS)


def _check_no_hooks(module: nn.Module, described: str) -> None:
    hooks = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    if any(getattr(module, name, None) for name in hooks):
        raise Unsupported.of("module-hooks", name=described)
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
        raise Unsupported("calling a module while global module hooks are registered")


def _rebound(frame: Frame, owner: ModuleVariable) -> nn.Module:
    """A shallow copy of a torch.nn module (and of its submodules) whose parameters and buffers
    are their Graph inputs. The module itself never changes: other threads calling it, eagerly
    or compiled, keep seeing its real tensors while this one captures."""
    from ember.capture.variables.builder import wrap

    copies: dict[int, nn.Module] = {}

    def rebind(module: nn.Module, base: Source | None) -> nn.Module:
        if id(module) in copies:  # a submodule shared under two names stays shared
            return copies[id(module)]
        copy = object.__new__(type(module))
        copies[id(module)] = copy
        copy.__dict__.update(module.__dict__)
        for table_name in ("_parameters", "_buffers"):
            table = dict(module.__dict__[table_name])
            for name, tensor in table.items():
                if tensor is not None and base is not None:
                    source = ModuleEntrySource(base, table_name, name)
                    table[name] = wrap(frame, tensor, source).realize()
            copy.__dict__[table_name] = table
        for name, value in module.__dict__.items():  # a tensor set as a plain attribute
            if isinstance(value, torch.Tensor) and base is not None:  # (FSDP1's param views)
                copy.__dict__[name] = wrap(frame, value, AttrSource(base, name)).realize()
        copy.__dict__["_modules"] = {
            name: None
            if child is None
            else rebind(
                child, ModuleEntrySource(base, "_modules", name) if base is not None else None
            )
            for name, child in module.__dict__["_modules"].items()
        }
        return copy

    return rebind(owner.module, owner.source)
