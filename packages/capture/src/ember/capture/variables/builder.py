"""Turning real Python values into Variables.

`wrap` is for values read from a source (the frame's arguments, globals, attributes of
modules): it emits the guards that make specializing on them safe. `wrap_result` is for
values produced while capturing (results of torch calls, constants), which need no guards.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import types
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ember.capture.guards.kinds import GuardKind
from ember.capture.guards.source import AttrSource, ItemSource, Source
from ember.capture.unsupported import Unsupported
from ember.capture.variables import superclass  # noqa: F401 - models super()
from ember.capture.variables.autocast import (
    AutocastClassVariable,
    AutocastExitVariable,
    AutocastVariable,
    ResumedAutocast,
)
from ember.capture.variables.base import Variable
from ember.capture.variables.builtins import BUILTINS, BuiltinVariable
from ember.capture.variables.constant import ConstantVariable, is_constant_value
from ember.capture.variables.containers import (
    DictVariable,
    IteratorVariable,
    ListVariable,
    ResumeIterator,
    SetVariable,
    TupleVariable,
)
from ember.capture.variables.context_vars import ContextVarVariable, is_context_var
from ember.capture.variables.environ import EnvironVariable
from ember.capture.variables.functional import PartialVariable
from ember.capture.variables.functions import BoundMethodVariable, FunctionVariable
from ember.capture.variables.modules import ModuleVariable
from ember.capture.variables.objects import UserObjectVariable
from ember.capture.variables.scripted import ORIGINAL, is_scripted, scripted_original
from ember.capture.variables.tensor import TensorVariable
from ember.capture.variables.torch import (
    GRAD_MODE_CLASSES,
    GradModeClassVariable,
    PythonModuleVariable,
    TorchFunctionVariable,
    is_torch_function,
)
from ember.prims import TracerTensor

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


def wrap(frame: Frame, value: Any, source: Source) -> Variable:
    """The Variable for `value` read from `source`, guarding what capture relies on."""
    session = frame.session
    if isinstance(value, torch.Tensor):
        return session.tensor_input(value, source)
    if is_constant_value(value) and type(value) is not tuple:
        session.guard(GuardKind.CONSTANT, source, value)
        return ConstantVariable(value, source)
    if type(value) in (list, dict):
        known = session.by_source.get(source)
        if known is not None:
            return known
        aliased = session.by_identity.get(id(value))
        if aliased is not None:  # one list under two names: mutations through either show
            session.guard(GuardKind.SAME_OBJECT, source, aliased[0])
            session.by_source[source] = aliased[1]
            return aliased[1]
    if type(value) in (list, tuple) or (isinstance(value, tuple) and hasattr(value, "_fields")):
        session.guard(GuardKind.TYPE, source, type(value))
        session.guard(GuardKind.LENGTH, source, len(value))
        items = [wrap(frame, item, ItemSource(source, i)) for i, item in enumerate(value)]
        if type(value) is list:
            listed = ListVariable(items, source)
            session.by_source[source] = listed
            session.by_identity[id(value)] = (source, listed)
            session.side_effects.containers.append(listed)
            return listed
        return TupleVariable(items, source, type(value))
    if type(value) is ResumeIterator:
        session.guard(GuardKind.TYPE, source, ResumeIterator)
        session.guard(GuardKind.CONSTANT, AttrSource(source, "position"), value.position)
        remaining = AttrSource(source, "values")
        session.guard(GuardKind.LENGTH, remaining, len(value.values))
        rest = range(value.position, len(value.values))
        return IteratorVariable(
            [wrap(frame, value.values[i], ItemSource(remaining, i)) for i in rest]
        )
    if type(value) in (set, frozenset) and all(is_constant_value(m) for m in value):
        session.guard(GuardKind.CONSTANT, source, value)
        return SetVariable([ConstantVariable(m) for m in value])
    if type(value) is dict:
        if not all(is_constant_value(key) for key in value):
            raise Unsupported(f"a dict with non-constant keys ({source.name()})")
        session.guard(GuardKind.TYPE, source, dict)
        session.guard(GuardKind.DICT_KEYS, source, tuple(value.keys()))
        entries = {key: wrap(frame, item, ItemSource(source, key)) for key, item in value.items()}
        mapping = DictVariable(entries, source)
        session.by_source[source] = mapping
        session.by_identity[id(value)] = (source, mapping)
        session.side_effects.containers.append(mapping)
        return mapping
    if isinstance(value, nn.Module):
        session.guard(GuardKind.ID, source, value)
        return ModuleVariable(value, source)
    if is_scripted(value):
        session.guard(GuardKind.ID, source, value)
        return wrap(frame, scripted_original(value), AttrSource(source, ORIGINAL))
    trusted = _trusted(value)
    if trusted is not None:
        session.guard(GuardKind.ID, source, value)
        return trusted
    if isinstance(value, types.FunctionType):
        if value.__closure__ and not value.__kwdefaults__ and is_constant_value(value.__defaults__):
            # A closure made anew each call (a lambda across a graph break): its code and
            # defaults identify it; its cells are read, and guarded, through the source.
            session.guard(GuardKind.TYPE, source, types.FunctionType)
            session.guard(GuardKind.ID, AttrSource(source, "__code__"), value.__code__)
            defaults = value.__defaults__
            session.guard(GuardKind.CONSTANT, AttrSource(source, "__defaults__"), defaults)
        else:
            session.guard(GuardKind.ID, source, value)
        return FunctionVariable.of(frame, value, source)
    if type(value) is ResumedAutocast:
        session.guard(GuardKind.TYPE, source, ResumedAutocast)
        session.prologue.append(source)
        value.suspend()  # the capture traces the block under an autocast of its own
        manager = AutocastVariable(value.args, value.kwargs)
        manager.enter(frame)
        return AutocastExitVariable(manager)
    if isinstance(value, types.MethodType):
        session.guard(GuardKind.ID, AttrSource(source, "__func__"), value.__func__)
        receiver = wrap(frame, value.__self__, AttrSource(source, "__self__"))
        function = wrap(frame, value.__func__, AttrSource(source, "__func__"))
        return BoundMethodVariable(function, receiver, source)
    if type(value) is functools.partial:
        session.guard(GuardKind.TYPE, source, functools.partial)
        function = wrap(frame, value.func, AttrSource(source, "func"))
        arguments = AttrSource(source, "args")
        session.guard(GuardKind.LENGTH, arguments, len(value.args))
        bound = [wrap(frame, a, ItemSource(arguments, i)) for i, a in enumerate(value.args)]
        keywords = AttrSource(source, "keywords")
        session.guard(GuardKind.DICT_KEYS, keywords, tuple(value.keywords))
        named = {k: wrap(frame, v, ItemSource(keywords, k)) for k, v in value.keywords.items()}
        return PartialVariable(function, bound, named, source)
    if isinstance(value, types.ModuleType):
        session.guard(GuardKind.ID, source, value)
        return PythonModuleVariable(value, source)
    if isinstance(value, type):
        session.guard(GuardKind.ID, source, value)
        return ConstantVariable(value, source)
    if is_context_var(value):
        session.guard(GuardKind.ID, source, value)
        return ContextVarVariable(value, source)
    if value is os.environ:
        session.guard(GuardKind.ID, source, value)
        return EnvironVariable(value, source)
    session.guard(GuardKind.TYPE, source, type(value))
    return UserObjectVariable(value, source)


def wrap_result(frame: Frame, value: Any) -> Variable:
    """The Variable for a value produced while capturing (no guards needed)."""
    if isinstance(value, TracerTensor):
        return TensorVariable(value)
    if isinstance(value, torch.Tensor):
        raise Unsupported(
            "a tensor that is neither an input nor computed in the function",
            "pass the tensor in as an argument or make it a module buffer",
        )
    if is_constant_value(value) and type(value) is not tuple:
        return ConstantVariable(value)
    if type(value) is list:
        return ListVariable([wrap_result(frame, item) for item in value])
    if isinstance(value, tuple):
        return TupleVariable([wrap_result(frame, item) for item in value], None, type(value))
    if type(value) is dict:
        return DictVariable({key: wrap_result(frame, item) for key, item in value.items()})
    if type(value) in (set, frozenset) and all(is_constant_value(m) for m in value):
        return SetVariable([ConstantVariable(m) for m in value])
    if is_scripted(value):
        return FunctionVariable.of(frame, scripted_original(value), None)
    trusted = _trusted(value)
    if trusted is not None:
        return trusted
    if isinstance(value, types.FunctionType):
        return FunctionVariable.of(frame, value, None)
    if isinstance(value, types.ModuleType):
        return PythonModuleVariable(value, None)
    if isinstance(value, type):
        return ConstantVariable(value)
    if isinstance(value, nn.Module):
        raise Unsupported(f"a module ({type(value).__name__}) reached without an attribute path")
    raise Unsupported(f"a value of type {type(value).__qualname__} made while capturing")


def _trusted(value: Any) -> Variable | None:
    """Builtins, grad-mode classes and torch functions, which capture models by name."""
    if (
        isinstance(value, (types.BuiltinFunctionType, type))
        and _hashable(value)
        and value in BUILTINS
    ):
        return BuiltinVariable(value)
    if isinstance(value, type) and value in GRAD_MODE_CLASSES:
        return GradModeClassVariable(value)
    if value is inspect.signature or value is copy.deepcopy:
        return BuiltinVariable(value)
    if value is torch.autocast or value is torch.amp.autocast:
        return AutocastClassVariable()
    if is_torch_function(value):
        return TorchFunctionVariable(value)
    if callable(value) and getattr(value, "__module__", None) == "math":
        return BuiltinVariable(value)
    return None


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
