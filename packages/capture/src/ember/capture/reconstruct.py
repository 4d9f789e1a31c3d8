"""Rebuilding Variables as real Python values in generated code: each Variable becomes an
`OutputPlan` (graph output, source read, constant, container, or a call), which codegen.py
turns into instructions. Used for the function's return value, for the stack and locals
carried into a resume function, and for the values that side effects write.

Mutable values are rebuilt once and shared through a temporary, so aliasing survives.
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sympy
import torch

from ember.capture.codegen import OutputPlan
from ember.capture.guards.symbolic import to_python
from ember.capture.unsupported import Unsupported
from ember.capture.variables.autocast import AutocastExitVariable, ResumedAutocast
from ember.capture.variables.base import NullVariable, Variable
from ember.capture.variables.builtins import BuiltinVariable
from ember.capture.variables.constant import (
    ConstantVariable,
    ExceptionVariable,
    concrete_value,
)
from ember.capture.variables.containers import (
    ContainerMethodVariable,
    DictVariable,
    DictViewVariable,
    IteratorVariable,
    ListVariable,
    ResumeIterator,
    SetVariable,
    TupleVariable,
)
from ember.capture.variables.copies import PrivateObjectVariable
from ember.capture.variables.dataclass_objects import DataclassVariable
from ember.capture.variables.functional import PartialVariable
from ember.capture.variables.functions import (
    BoundMethodVariable,
    CellVariable,
    FunctionVariable,
)
from ember.capture.variables.modules import ModuleVariable
from ember.capture.variables.new_objects import NewObjectVariable, build_new_object
from ember.capture.variables.objects import OpaqueMethodVariable
from ember.capture.variables.superclass import SuperVariable
from ember.capture.variables.tensor import (
    DataMethodVariable,
    TensorMethodVariable,
    TensorVariable,
)
from ember.capture.variables.torch import (
    GradModeClassVariable,
    GradModeExitVariable,
    PythonModuleVariable,
    TorchFunctionVariable,
    restore_grad_mode,
)
from ember.prims import TracerTensor

if TYPE_CHECKING:
    from ember.capture.session import CaptureSession

# Compiles a user function on its own (a callee whose body broke the graph).
CompileCallee = Callable[[types.FunctionType], Callable[..., Any]]


def _method(function: Any, receiver: Any) -> Any:
    return types.MethodType(function, receiver)


def _replace_list(target: list[Any], values: list[Any]) -> None:
    target[:] = values


def _replace_dict(target: dict[Any, Any], values: dict[Any, Any]) -> None:
    target.clear()
    target.update(values)


REPLACE_LIST = _replace_list
REPLACE_DICT = _replace_dict


# The functions that compute a size from input sizes, by (parameters, Python expression).
_size_functions: dict[tuple[tuple[str, ...], str], Callable[..., Any]] = {}


class Reconstructor:
    """Plans for the Variables of one capture; tensors made in the graph become outputs."""

    def __init__(self, session: CaptureSession, compile_callee: CompileCallee | None) -> None:
        self.session = session
        self.outputs: list[TracerTensor] = []
        self.compile_callee = compile_callee
        self._output_index: dict[int, int] = {}
        self._shared: dict[int, str] = {}
        self._shared_builds: dict[str, tuple[OutputPlan, ...]] = {}

    def plan(self, value: Variable) -> OutputPlan:
        """How generated code rebuilds `value`."""
        if isinstance(value, TensorVariable):
            return self._tensor(value)
        if isinstance(value, ConstantVariable):
            return self._constant(value.value)
        if isinstance(value, NullVariable):
            return OutputPlan("null")
        mutable = isinstance(
            value,
            (ListVariable, DictVariable, SetVariable, DataclassVariable, NewObjectVariable),
        )
        if mutable and value.source is None:
            name = self._shared.get(id(value))
            if name is not None:
                return OutputPlan("temp", name, self._shared_builds.get(name, ()))
            name = self._shared[id(value)] = f"__ember_shared{len(self._shared)}"
            build = (self._build(value),)
            self._shared_builds[name] = build
            return OutputPlan("store", name, build)
        return self._build(value)

    def callee(self, value: Variable) -> OutputPlan:
        """A callable the generated code calls where the graph broke inside it: user
        functions, methods and modules are compiled on their own."""
        fn: Any = None
        receiver: Variable | None = None
        if isinstance(value, FunctionVariable):
            fn = value.fn
        elif isinstance(value, BoundMethodVariable) and isinstance(
            value.function, FunctionVariable
        ):
            fn, receiver = value.function.fn, value.receiver
        elif (
            isinstance(value, ModuleVariable)
            and value.source is not None
            and not isinstance(value.module, torch.jit.ScriptModule)  # TorchScript: run it
        ):
            forward = type(value.module).forward
            if _is_wrapper(value.module) or _has_hooks(value.module):
                if self.compile_callee is not None:  # hooks run around the compiled forward
                    return self._module_callee(value)
            elif isinstance(forward, types.FunctionType):
                fn, receiver = forward, value
        if not _compilable(fn) or self.compile_callee is None:
            return self.plan(value)
        compiled = OutputPlan("constant", self.compile_callee(fn))
        if receiver is None:
            return compiled
        return OutputPlan("call", _method, (compiled, self.plan(receiver)))

    def _module_callee(self, value: ModuleVariable) -> OutputPlan:
        """A module with hooks, or a DDP / FSDP1 wrapper, called as it is (hooks, the
        wrapper's communication) with its own (or its wrapped module's) forward compiled."""
        from ember.capture.distributed.wrappers import (
            compiled_wrapper_call,
            forward_function,
            is_wrapper,
            with_compiled_forward,
            wrapped_module,
        )

        assert self.compile_callee is not None
        module = value.module
        wrapper = is_wrapper(module)
        forward = forward_function(wrapped_module(module) if wrapper else module)
        if forward is None or not _compilable(forward):
            return self.plan(value)
        call = compiled_wrapper_call if wrapper else with_compiled_forward
        compiled = OutputPlan("constant", self.compile_callee(forward))
        return OutputPlan("call", call, (compiled, self.plan(value)))

    def _constant(self, value: Any) -> OutputPlan:
        """A constant; a size computed from symbolic sizes (`n // 2`, `x.shape`) is computed
        again from the input sizes by the entry function, so a length kept across a graph
        break or returned does not pin the Graph to this call's sizes. What the integer
        printer cannot write (a SymFloat) takes this call's value, guarded."""
        if isinstance(value, (torch.SymInt, torch.SymBool)):
            computed = self._size_expression(value)
            if computed is not None:
                return computed
        if isinstance(value, torch.Size) or type(value) is tuple:
            if any(isinstance(item, (torch.SymInt, torch.SymBool)) for item in value):
                items = OutputPlan("tuple", children=tuple(self._constant(v) for v in value))
                if type(value) is tuple:
                    return items
                return OutputPlan("call", torch.Size, (items,))
        return OutputPlan("constant", concrete_value(value))

    def _size_expression(self, value: torch.SymInt | torch.SymBool) -> OutputPlan | None:
        shape_env = self.session.tracer.shape_env
        expr = shape_env.replace(value.node.expr) if shape_env is not None else None
        if expr is None or not isinstance(expr, sympy.Basic) or expr.is_number:
            return None
        names = sorted(str(sym) for sym in expr.free_symbols)
        if not all(name in self.session.sizes for name in names):
            return None
        code = to_python(expr, lambda sym: sym.name)
        if code is None:
            return None
        function = _size_functions.get((tuple(names), code))
        if function is None:
            function = eval(f"lambda {', '.join(names)}: {code}")  # noqa: S307 - printed here
            _size_functions[(tuple(names), code)] = function
        sizes = tuple(OutputPlan("source", self.session.sizes[name]) for name in names)
        return OutputPlan("call", function, sizes)

    def _tensor(self, value: TensorVariable) -> OutputPlan:
        for graph_input in self.session.inputs:
            if graph_input.variable.tensor is value.tensor:
                return OutputPlan("source", graph_input.source)
        index = self._output_index.get(id(value.tensor))
        if index is None:
            index = self._output_index[id(value.tensor)] = len(self.outputs)
            self.outputs.append(value.tensor)
        return OutputPlan("graph", index)

    def _build(self, value: Variable) -> OutputPlan:
        builder = _BUILDERS.get(type(value))
        if builder is not None:
            return builder(self, value)
        if value.source is not None:
            return OutputPlan("source", value.source)
        raise Unsupported(
            f"returning or keeping {value.describe()} across a graph break",
            "return tensors, Python constants, or lists/tuples/dicts of them",
            self.session.location,
        )


def _is_wrapper(module: Any) -> bool:
    from ember.capture.distributed.wrappers import is_wrapper

    return is_wrapper(module)


def _has_hooks(module: Any) -> bool:
    """Calling forward directly would skip hooks: such a module is called as it is."""
    from torch import nn

    hooks = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    if any(getattr(module, name, None) for name in hooks):
        return True
    return bool(
        nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks
    )


def _compilable(fn: Any) -> bool:
    import inspect

    from ember.capture.variables.functions import DISABLED_CODES

    if not isinstance(fn, types.FunctionType) or fn.__code__ in DISABLED_CODES:
        return False
    flags = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    return not fn.__code__.co_flags & flags


Builder = Callable[[Reconstructor, Any], OutputPlan]


def _tuple(r: Reconstructor, value: TupleVariable) -> OutputPlan:
    if value.source is not None and all(
        not isinstance(item, TensorVariable) or item.source is not None for item in value.values
    ):
        return OutputPlan("source", value.source)
    children = tuple(r.plan(item) for item in value.values)
    kind = value.tuple_type
    if kind is tuple:
        return OutputPlan("tuple", children=children)
    if hasattr(kind, "_fields"):
        return OutputPlan("namedtuple", kind, children)
    return OutputPlan("structseq", kind, children)


def _list(r: Reconstructor, value: ListVariable) -> OutputPlan:
    if value.source is not None:
        return OutputPlan("source", value.source)
    return OutputPlan("list", children=tuple(r.plan(item) for item in value.values))


def _dict(r: Reconstructor, value: DictVariable) -> OutputPlan:
    if value.source is not None:
        return OutputPlan("source", value.source)
    children = tuple(r.plan(item) for item in value.entries.values())
    return OutputPlan("dict", tuple(value.entries), children)


def _set(r: Reconstructor, value: SetVariable) -> OutputPlan:
    members = tuple(OutputPlan("constant", m) for m in value.members)
    return OutputPlan("structseq", set, members)


def _dataclass(r: Reconstructor, value: DataclassVariable) -> OutputPlan:
    children = tuple(r.plan(v) for v in value.fields.values())
    return OutputPlan("construct", (value.cls, tuple(value.fields)), children)


def _new_object(r: Reconstructor, value: NewObjectVariable) -> OutputPlan:
    names = tuple(value.attributes)
    values = OutputPlan("tuple", children=tuple(r.plan(v) for v in value.attributes.values()))
    parts = (OutputPlan("constant", value.cls), OutputPlan("constant", names), values)
    return OutputPlan("call", build_new_object, parts)


def _private_object(r: Reconstructor, value: PrivateObjectVariable) -> OutputPlan:
    return OutputPlan("call", copy.deepcopy, (OutputPlan("constant", value.value),))


def _iterator_plan(r: Reconstructor, value: IteratorVariable) -> OutputPlan:
    rest = value.values[value.position :]
    listed = OutputPlan("list", children=tuple(r.plan(item) for item in rest))
    return OutputPlan("call", ResumeIterator, (listed,))


def _function(r: Reconstructor, value: FunctionVariable) -> OutputPlan:
    if value.source is not None:
        return OutputPlan("source", value.source)
    if value.fn is not None:
        return OutputPlan("constant", value.fn)
    if value.kwdefaults:
        raise Unsupported(
            f"keeping {value.describe()}, made inside the function, across a graph break",
            "define it at module level",
        )
    # Cells get their current contents (a comprehension or lambda reading outer locals);
    # a later write to the variable outside is not seen by this copy.
    cells = tuple(_cell(r, cell) for cell in value.closure)
    defaults = (
        OutputPlan("tuple", children=tuple(r.plan(d) for d in value.defaults))
        if value.defaults
        else OutputPlan("constant", None)
    )
    parts = (
        OutputPlan("constant", value.code),
        OutputPlan("constant", value.globals),
        OutputPlan("constant", value.name.rsplit(".", 1)[-1]),
        defaults,
        OutputPlan("tuple", children=cells),
    )
    return OutputPlan("call", types.FunctionType, parts)


def _cell(r: Reconstructor, cell: CellVariable) -> OutputPlan:
    if cell.contents is not None:
        return OutputPlan("call", types.CellType, (r.plan(cell.contents),))
    if cell._real is not None:  # a cell of a real closure, not read while capturing
        return OutputPlan("constant", cell._real)
    return OutputPlan("call", types.CellType, ())


def _bound_method(r: Reconstructor, value: BoundMethodVariable) -> OutputPlan:
    if value.source is not None:
        return OutputPlan("source", value.source)
    return OutputPlan("call", _method, (r.plan(value.function), r.plan(value.receiver)))


def _container_method(r: Reconstructor, value: ContainerMethodVariable) -> OutputPlan:
    parts = (r.plan(value.owner), OutputPlan("constant", value.name))
    return OutputPlan("call", getattr, parts)


def _make_partial(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return functools.partial(function, *args, **kwargs)


def _partial(r: Reconstructor, value: PartialVariable) -> OutputPlan:
    if value.source is not None:
        return OutputPlan("source", value.source)
    args = OutputPlan("tuple", children=tuple(r.plan(a) for a in value.args))
    kwargs = OutputPlan(
        "dict", tuple(value.kwargs), tuple(r.plan(v) for v in value.kwargs.values())
    )
    return OutputPlan("call", _make_partial, (r.plan(value.function), args, kwargs))


def _data_method(r: Reconstructor, value: DataMethodVariable) -> OutputPlan:
    return OutputPlan("call", getattr, (r.plan(value.owner), OutputPlan("constant", value.name)))


def _tensor_method(r: Reconstructor, value: TensorMethodVariable) -> OutputPlan:
    parts = (r.plan(value.owner), OutputPlan("constant", value.attribute))
    return OutputPlan("call", getattr, parts)


def _grad_mode_exit(r: Reconstructor, value: GradModeExitVariable) -> OutputPlan:
    previous = value.manager.previous
    return OutputPlan("call", restore_grad_mode, (OutputPlan("constant", previous),))


def _autocast_exit(r: Reconstructor, value: AutocastExitVariable) -> OutputPlan:
    manager = value.manager
    parts = (OutputPlan("constant", manager.args), OutputPlan("constant", manager.kwargs))
    return OutputPlan("call", ResumedAutocast, parts)


def _exception(r: Reconstructor, value: ExceptionVariable) -> OutputPlan:
    return OutputPlan("call", value.cls, tuple(r.plan(arg) for arg in value.args))


def _dict_view(r: Reconstructor, value: DictViewVariable) -> OutputPlan:
    return OutputPlan("call", getattr(dict, value.kind), (r.plan(value.owner),))


def _super(r: Reconstructor, value: SuperVariable) -> OutputPlan:
    return OutputPlan("call", super, (OutputPlan("constant", value.cls), r.plan(value.receiver)))


def _opaque_method(r: Reconstructor, value: OpaqueMethodVariable) -> OutputPlan:
    return OutputPlan("call", getattr, (r.plan(value.owner), OutputPlan("constant", value.name)))


def _real(attribute: str) -> Builder:
    def build(r: Reconstructor, value: Any) -> OutputPlan:
        return OutputPlan("constant", getattr(value, attribute))

    return build


def _module(r: Reconstructor, value: Variable) -> OutputPlan:
    if value.source is None:
        raise Unsupported(f"keeping {value.describe()} across a graph break")
    return OutputPlan("source", value.source)


_BUILDERS: dict[type, Builder] = {
    TupleVariable: _tuple,
    ListVariable: _list,
    DictVariable: _dict,
    SetVariable: _set,
    DataclassVariable: _dataclass,
    NewObjectVariable: _new_object,
    PrivateObjectVariable: _private_object,
    IteratorVariable: _iterator_plan,
    FunctionVariable: _function,
    BoundMethodVariable: _bound_method,
    ContainerMethodVariable: _container_method,
    BuiltinVariable: _real("fn"),
    TorchFunctionVariable: _real("fn"),
    GradModeClassVariable: _real("kind"),
    PythonModuleVariable: _real("module"),
    ModuleVariable: _module,
    PartialVariable: _partial,
    DataMethodVariable: _data_method,
    TensorMethodVariable: _tensor_method,
    GradModeExitVariable: _grad_mode_exit,
    AutocastExitVariable: _autocast_exit,
    ExceptionVariable: _exception,
    DictViewVariable: _dict_view,
    SuperVariable: _super,
    OpaqueMethodVariable: _opaque_method,
}


def register_builder(kind: type, builder: Builder) -> None:
    """Teach reconstruction a Variable class defined elsewhere (context managers, ...)."""
    _BUILDERS[kind] = builder
