"""Capture one call: interpret the function's bytecode over Variables, record its tensor
work into a Graph, collect the guards, hand the Graph to the backend, and generate the
entry function that replays the result on later calls whose guards hold.
"""

from __future__ import annotations

import logging
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ember.capture import logs
from ember.capture.bytecode import Frame
from ember.capture.cache import CacheEntry
from ember.capture.codegen import OutputPlan, entry_function
from ember.capture.guards.check import build_check
from ember.capture.guards.kinds import GuardKind
from ember.capture.guards.source import AttrSource, ItemSource, LocalSource
from ember.capture.session import CaptureSession
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable
from ember.capture.variables.containers import (
    DictVariable,
    ListVariable,
    SetVariable,
    TupleVariable,
)
from ember.capture.variables.dataclass_objects import DataclassVariable
from ember.capture.variables.functions import CellVariable
from ember.capture.variables.tensor import TensorVariable
from ember.prims import Graph, Ref, Tracer, TracerTensor, tree_flatten

# The compiled function itself travels in the arguments dict under this key, so guards and
# generated code can read its closure cells.
FUNCTION_KEY = "__ember_function__"

Compiler = Callable[[Graph, Sequence[Any]], Callable[..., Any]]


def capture_call(
    fn: types.FunctionType, arguments: dict[str, Any], compiler: Compiler
) -> CacheEntry:
    """Capture `fn` called with `arguments` (parameter name -> value) into a cache entry."""
    started = time.perf_counter()
    tracer = Tracer()
    session = CaptureSession(tracer, fn.__globals__, fn.__qualname__)
    session.guard(GuardKind.GRAD_MODE, None, torch.is_grad_enabled())
    grad_mode = torch.is_grad_enabled()
    root_source = LocalSource(FUNCTION_KEY)
    closure = [
        CellVariable(
            real=cell,
            source=AttrSource(
                ItemSource(AttrSource(root_source, "__closure__"), i), "cell_contents"
            ),
        )
        for i, cell in enumerate(fn.__closure__ or ())
    ]
    user_arguments = {k: v for k, v in arguments.items() if k != FUNCTION_KEY}
    try:
        with tracer.active():
            frame = Frame(
                session, fn.__code__, fn.__globals__, {}, closure, root_arguments=user_arguments
            )
            result = frame.run()
            outputs: list[TracerTensor] = []
            plan = _plan(session, result, outputs, {})
    finally:
        torch.set_grad_enabled(grad_mode)
    graph: Graph | None = None
    compiled = None
    if tracer.graph.nodes:
        example_inputs = [entry.tensor for entry in session.inputs]
        leaves = [Ref(entry.value_name) for entry in session.inputs]
        tracer.set_inputs_signature(tree_flatten(tuple(example_inputs))[1], leaves)
        graph = tracer.finish(tuple(outputs))
        graph.name = _graph_name(fn)
        graph.meta = {"pass": "capture", "time_ms": f"{(time.perf_counter() - started) * 1e3:.1f}"}
        if logs.graphs.isEnabledFor(logging.INFO):
            logs.graphs.info("captured %s:\n%s", fn.__qualname__, graph)
        compiled = compiler(graph, example_inputs)
    elif outputs:
        raise AssertionError("graph outputs without graph nodes")
    check = build_check(session.guards)
    if logs.guards.isEnabledFor(logging.INFO):
        logs.guards.info(
            "guards of %s:\n%s",
            fn.__qualname__,
            "\n".join(
                f"  {g.kind.value:<12} {g.source.name() if g.source else ''}"
                for g in session.guards
            ),
        )
    sources = [entry.source for entry in session.inputs] if compiled is not None else []
    entry = entry_function(compiled, sources, plan, fn.__globals__, f"__ember_entry_{fn.__name__}")
    return CacheEntry(check, entry, graph)


def _graph_name(fn: types.FunctionType) -> str:
    name = fn.__name__ if fn.__name__ != "<lambda>" else "lambda_"
    return name if name.isidentifier() else "forward"


def _plan(
    session: CaptureSession, value: Variable, outputs: list[TracerTensor], seen: dict[int, int]
) -> OutputPlan:
    """How the entry function rebuilds `value`; tensors made in the graph become outputs."""
    if isinstance(value, TensorVariable):
        for graph_input in session.inputs:
            if graph_input.variable.tensor is value.tensor:
                return OutputPlan("source", graph_input.source)
        index = seen.get(id(value.tensor))
        if index is None:
            index = seen[id(value.tensor)] = len(outputs)
            outputs.append(value.tensor)
        return OutputPlan("graph", index)
    if isinstance(value, ConstantVariable):
        return OutputPlan("constant", value.value)
    if isinstance(value, TupleVariable):
        children = tuple(_plan(session, item, outputs, seen) for item in value.values)
        kind = value.tuple_type
        if kind is tuple:
            return OutputPlan("tuple", children=children)
        if hasattr(kind, "_fields"):
            return OutputPlan("namedtuple", kind, children)
        return OutputPlan("structseq", kind, children)
    if isinstance(value, ListVariable):
        return OutputPlan(
            "list", children=tuple(_plan(session, v, outputs, seen) for v in value.values)
        )
    if isinstance(value, DictVariable):
        children = tuple(_plan(session, v, outputs, seen) for v in value.entries.values())
        return OutputPlan("dict", tuple(value.entries), children)
    if isinstance(value, DataclassVariable):
        children = tuple(_plan(session, v, outputs, seen) for v in value.fields.values())
        return OutputPlan("construct", (value.cls, tuple(value.fields)), children)
    if isinstance(value, SetVariable):
        members = tuple(OutputPlan("constant", m) for m in value.members)
        return OutputPlan("structseq", set, members)
    if value.source is not None:
        return OutputPlan("source", value.source)
    raise Unsupported(
        f"returning {value.describe()} from a compiled function",
        "return tensors, Python constants, or lists/tuples/dicts of them",
        session.location,
    )
