"""Recording prim calls made on tracing tensors into the tracer's Graph.

A prim called with a `TracerTensor` computes its outputs with its meta rule (with the
tracer's dispatch mode paused, so the meta computation itself is not recorded), appends one
node named `prims::<name>` and answers with new tracing tensors.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ember.prims.errors import TraceError
from ember.prims.graph import Node, Ref, Value
from ember.prims.source import user_location
from ember.prims.tracer.recorder import Tracer
from ember.prims.tracer.symbolic_meta import SymbolicMetaMode
from ember.prims.tracer.tensor import TracerTensor

if TYPE_CHECKING:
    from ember.prims.primitives.prim import Prim


# The tracer that prims called without tracing operands (full, iota) record into.
_CURRENT: ContextVar[Tracer | None] = ContextVar("ember_prims_recording", default=None)


@contextmanager
def recording_into(tracer: Tracer) -> Iterator[Tracer]:
    """Make prims with only literal operands record into `tracer` inside this block."""
    token = _CURRENT.set(tracer)
    try:
        with tracer.active():
            yield tracer
    finally:
        _CURRENT.reset(token)


def tracing_owner(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tracer | None:
    """The Tracer that owns the first tracing tensor among the arguments, or the current one."""
    for arg in (*args, *kwargs.values()):
        if isinstance(arg, TracerTensor):
            return arg.owner  # type: ignore[return-value]
        if isinstance(arg, (list, tuple)):
            for item in arg:
                if isinstance(item, TracerTensor):
                    return item.owner  # type: ignore[return-value]
    return _CURRENT.get()


def record_prim(tracer: Tracer, prim: Prim, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Append a node for `prim(*args, **kwargs)` to the tracer's Graph; return tracing tensors."""
    node_args = [_argument(tracer, a) for a in args]
    node_kwargs = {key: _argument(tracer, a) for key, a in kwargs.items()}
    with _disable_current_modes(), SymbolicMetaMode():
        try:
            result = prim.meta(
                *[_meta(a) for a in args], **{k: _meta(a) for k, a in kwargs.items()}
            )
        except Exception as error:
            raise TraceError(f"{prim.qualname}: {type(error).__name__}: {error}") from error
    device = _device(args, kwargs)
    node = Node(prim.qualname, node_args, node_kwargs, [], user_location())
    results = result if isinstance(result, tuple) else (result,)
    wrapped: list[Any] = []
    for meta in results:
        name = tracer._namer.fresh(prim.name)
        value = Value(name, tracer._spec_of(meta, device, False))
        node.outputs.append(value)
        wrapped.append(
            TracerTensor(meta, device=device, requires_grad=False, value_name=name, owner=tracer)
        )
    tracer.graph.nodes.append(node)
    return tuple(wrapped) if isinstance(result, tuple) else wrapped[0]


def _argument(tracer: Tracer, arg: Any) -> Any:
    if isinstance(arg, TracerTensor):
        return Ref(arg.value_name)
    if isinstance(arg, torch.Tensor):
        return tracer.constant(arg)
    if isinstance(arg, (list, tuple)):
        return [_argument(tracer, item) for item in arg]
    if isinstance(arg, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return tracer._literal(arg)
    return arg


def _meta(arg: Any) -> Any:
    if isinstance(arg, TracerTensor):
        return arg.meta
    if isinstance(arg, torch.Tensor):
        return torch.empty_strided(arg.shape, arg.stride(), dtype=arg.dtype, device="meta")
    if isinstance(arg, list):
        return [_meta(item) for item in arg]
    if isinstance(arg, tuple):
        return tuple(_meta(item) for item in arg)
    return arg


def _device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device:
    device = kwargs.get("device")
    if device is not None:
        return torch.device(device)
    for arg in (*args, *kwargs.values()):
        items = arg if isinstance(arg, (list, tuple)) else (arg,)
        for item in items:
            if isinstance(item, torch.Tensor):
                return item.device
    return torch.device("cpu")
