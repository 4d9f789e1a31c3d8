"""Compiling through torch.distributed's module wrappers: DDP, FSDP1, and hooked modules.

DistributedDataParallel and FSDP1's FullyShardedDataParallel are wrapper modules whose
forward runs the communication bookkeeping (DDP's reducer, FSDP's unshard/reshard and the
autograd hooks that reduce gradients) around a call of the wrapped module. Capture does not
trace that bookkeeping: the wrapper's forward runs as it is, and only the wrapped module's
forward is compiled (for DDP, with its Graph split at DDP's gradient buckets). A compiled
wrapper is an object of a class derived from the wrapper's that shares its `__dict__`, as
`ember.compile(module)` makes for any module, so reducer, handles and state stay one.
FSDP2 (`fully_shard`) keeps the user's module and adds forward hooks: a module with hooks
is called through its hooks with its forward compiled (`with_compiled_forward`).
"""

from __future__ import annotations

import sys
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from ember.capture.backends.registry import Backend
from ember.capture.distributed.buckets import bucketed_backend
from ember.prims import Graph

CompileModule = Callable[[nn.Module, Backend], nn.Module]

_DDP_MODULE = "torch.nn.parallel.distributed"
_FSDP1_MODULE = "torch.distributed.fsdp.fully_sharded_data_parallel"


def _class(module_name: str, name: str) -> type | None:
    """A torch.distributed class if its module is imported (a wrapper exists only then)."""
    found = sys.modules.get(module_name)
    return getattr(found, name, None) if found is not None else None


def is_ddp(module: object) -> bool:
    cls = _class(_DDP_MODULE, "DistributedDataParallel")
    return cls is not None and isinstance(module, cls)


def is_fsdp1(module: object) -> bool:
    cls = _class(_FSDP1_MODULE, "FullyShardedDataParallel")
    return cls is not None and isinstance(module, cls)


def is_wrapper(module: object) -> bool:
    """Whether `module` is a DDP or FSDP1 wrapper, whose forward capture does not trace."""
    return is_ddp(module) or is_fsdp1(module)


def wrapped_module(wrapper: nn.Module) -> nn.Module:
    """The module a DDP or FSDP1 wrapper calls."""
    name = "module" if is_ddp(wrapper) else "_fsdp_wrapped_module"
    inner = wrapper._modules[name]
    assert inner is not None
    return inner


def compile_wrapper(wrapper: nn.Module, backend: Backend, compile_module: CompileModule) -> Any:
    """`wrapper` (DDP or FSDP1) with its wrapped module compiled by `compile_module`."""
    inner = wrapped_module(wrapper)
    if is_ddp(wrapper):
        return _derived(wrapper, compile_module(inner, bucketed_backend(wrapper, backend)))
    return _derived(wrapper, compile_module(inner, backend))


def _derived(wrapper: nn.Module, inner: nn.Module) -> nn.Module:
    """An object of a class derived from `wrapper`'s, sharing its `__dict__`, whose calls of
    the wrapped module call `inner` instead."""
    cls = type(wrapper)
    namespace: dict[str, Any] = {
        "_ember_original_class": getattr(cls, "_ember_original_class", cls),
        "_ember_wrapped": inner,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
    }
    if is_ddp(wrapper):
        # DDP.forward runs its reducer bookkeeping and calls _run_ddp_forward for the module
        namespace["_run_ddp_forward"] = _run_wrapped
    else:
        # FSDP1's forward reads self._fsdp_wrapped_module (from _modules, so __getattr__)
        namespace["__getattr__"] = _fsdp_getattr
    derived = type(cls.__name__, (cls,), namespace)
    compiled: nn.Module = object.__new__(derived)
    compiled.__dict__ = wrapper.__dict__
    return compiled


def _run_wrapped(self: Any, *inputs: Any, **kwargs: Any) -> Any:
    return self._ember_wrapped(*inputs, **kwargs)


def _fsdp_getattr(self: Any, name: str) -> Any:
    if name == "_fsdp_wrapped_module":
        return type(self)._ember_wrapped
    return super(type(self), self).__getattr__(name)


# module -> (compiled forward, the module's twin calling it), for with_compiled_forward
_TWINS: weakref.WeakKeyDictionary[nn.Module, tuple[Any, nn.Module]] = weakref.WeakKeyDictionary()


def with_compiled_forward(forward: Any, module: nn.Module) -> nn.Module:
    """A twin of `module` (same `__dict__`, so the same hooks, parameters and state) whose
    forward is `forward`: calling it runs the module's hooks around the compiled forward.
    Capture calls a module with hooks this way where it breaks the graph at its call."""
    known = _TWINS.get(module)
    if known is not None and known[0] is forward:
        return known[1]
    cls = type(module)
    namespace = {
        "forward": _own_compiled(forward),
        "_ember_original_class": getattr(cls, "_ember_original_class", cls),
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
    }
    twin: nn.Module = object.__new__(type(cls.__name__, (cls,), namespace))
    twin.__dict__ = module.__dict__
    _TWINS[module] = (forward, twin)
    return twin


# the compiled function of one forward shared by a family -> its backend behind a memo
_SHARED: weakref.WeakKeyDictionary[Any, SharedBackend] = weakref.WeakKeyDictionary()


class SharedBackend:
    """A backend that compiles each distinct Graph once: the blocks of a model (twelve
    sharded GPT-2 layers) capture equal Graphs, each under its own cache table."""

    def __init__(self, backend: Backend, code: types.CodeType) -> None:
        from ember.capture.cache import CACHE

        self.backend = backend
        self.table = CACHE.table(code)  # registered, so reset() forgets it too
        self.__name__ = getattr(backend, "__name__", "backend")

    def __call__(self, graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        from ember.capture.guards.kinds import autocast_state

        state = (torch.is_grad_enabled(), autocast_state())
        known = self.table.compiled_for(graph, state)
        if known is not None:
            return known
        compiled = self.backend(graph, example_inputs)
        self.table.compiled.append((graph, state, compiled))
        return compiled


def _own_compiled(forward: Any) -> Any:
    """`forward` (compiled once for a family) compiled again for one module: capture guards
    on the module object, so one shared function would recompile for every block and, past
    the cache-size limit (8), run the rest eagerly. Equal Graphs still compile once."""
    from ember.capture.compile import _compile_function

    state = getattr(forward, "_ember_compiled", None)
    if state is None:
        return forward
    shared = _SHARED.get(state)
    if shared is None:
        shared = _SHARED[state] = SharedBackend(state.backend, state.code)
    return _compile_function(
        state.fn, shared, state.backend_name, state.fullgraph, state.family, dynamic=state.dynamic
    )


def compiled_wrapper_call(forward: Any, wrapper: nn.Module) -> nn.Module:
    """`wrapper` (DDP or FSDP1) calling its wrapped module with `forward` compiled, for a
    wrapper met inside a compiled function (capture breaks the graph at its call)."""
    known = _TWINS.get(wrapper)
    if known is not None and known[0] is forward:
        return known[1]
    inner = wrapped_module(wrapper)
    inner_forward = _bucketed(forward, wrapper) if is_ddp(wrapper) else forward
    compiled = _derived(wrapper, with_compiled_forward(inner_forward, inner))
    _TWINS[wrapper] = (forward, compiled)
    return compiled


def _bucketed(forward: Any, ddp: nn.Module) -> Any:
    """`forward` (compiled with its family's backend) compiled again with that backend
    behind DDP's bucket splitter."""
    from ember.capture.compile import _compile_function

    state = getattr(forward, "_ember_compiled", None)
    if state is None:
        return forward
    return _compile_function(
        state.fn,
        bucketed_backend(ddp, state.backend),
        state.backend_name,
        state.fullgraph,
        state.family,
        dynamic=state.dynamic,
    )


def forward_function(module: nn.Module) -> types.FunctionType | None:
    """The Python function a module's class runs as forward, if it is one."""
    forward = type(module).forward
    return forward if isinstance(forward, types.FunctionType) else None
