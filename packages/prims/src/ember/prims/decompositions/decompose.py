"""`decompose(graph, table)`: replace every node whose operator has an entry in `table` by the
nodes its decomposition records, keeping the node's user source location on each of them.

Each round re-traces the whole Graph with a fresh Tracer (so every spec is recomputed);
decompositions that call other ATen ops are expanded in the following rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ember.prims.errors import PrimsError
from ember.prims.graph import Graph, Node, Ref, Value
from ember.prims.ops import resolve_op
from ember.prims.primitives.recording import recording_into
from ember.prims.specs import TensorSpec
from ember.prims.tracer.recorder import Tracer
from ember.prims.tracer.tensor import TracerTensor


class DecompositionError(PrimsError):
    """A decomposition failed or produced a value unlike the op it replaces."""


def decompose(
    graph: Graph, table: Mapping[str, Callable[..., Any]], *, max_rounds: int = 12
) -> Graph:
    """A new Graph computing the same as `graph`, with every op in `table` decomposed."""
    started = time.perf_counter()
    current = graph
    for _ in range(max_rounds):
        if not any(node.target in table for node in current.nodes):
            break
        current = _retrace(current, table)
    else:
        left = sorted({n.target for n in current.nodes if n.target in table})
        raise DecompositionError(f"decompositions did not finish in {max_rounds} rounds: {left}")
    if current is graph:
        current = _retrace(graph, {})
    current.meta = {"pass": "decompose", "time_ms": f"{(time.perf_counter() - started) * 1e3:.1f}"}
    return current


def _retrace(graph: Graph, table: Mapping[str, Callable[..., Any]]) -> Graph:
    tracer = Tracer()
    new = tracer.graph
    new.inputs = list(graph.inputs)
    new.in_spec, new.input_leaves = graph.in_spec, list(graph.input_leaves)
    new.symbols, new.guards = dict(graph.symbols), list(graph.guards)
    new.constants, new.subgraphs = dict(graph.constants), dict(graph.subgraphs)
    new.name = graph.name
    env: dict[str, Any] = {}
    for graph_input in graph.inputs:
        tracer._namer.fresh(graph_input.value.name)  # keep input names; new values avoid them
        env[graph_input.value.name] = _placeholder(tracer, graph_input.value)
    with torch.no_grad(), recording_into(tracer):
        for node in graph.nodes:
            _retrace_node(tracer, node, table, env)
    new.out_spec = graph.out_spec
    new.output_leaves = [_output_leaf(tracer, leaf, env) for leaf in graph.output_leaves]
    return new


def _retrace_node(
    tracer: Tracer, node: Node, table: Mapping[str, Callable[..., Any]], env: dict[str, Any]
) -> None:
    fn = table.get(node.target) or resolve_op(node.target)
    args = [_bind(a, env) for a in node.args]
    kwargs = {key: _bind(a, env) for key, a in node.kwargs.items()}
    start = len(tracer.graph.nodes)
    try:
        result = fn(*args, **kwargs)
    except DecompositionError:
        raise
    except Exception as error:
        where = f" (from {node.source})" if node.source is not None else ""
        raise DecompositionError(
            f"decomposing {node.target}{where} failed: {type(error).__name__}: {error}"
        ) from error
    for recorded in tracer.graph.nodes[start:]:
        recorded.source = node.source
    if not node.outputs:
        return  # an op run for its checks or effects only
    results = (result,) if len(node.outputs) == 1 else tuple(result)
    for output, produced in zip(node.outputs, results):
        if isinstance(output, Value):
            env[output.name] = _checked(node, output, produced)
        elif isinstance(output, list):
            for value, item in zip(output, produced):
                env[value.name] = _checked(node, value, item)


def _checked(node: Node, value: Value, produced: Any) -> Any:
    spec = value.spec
    if isinstance(spec, TensorSpec) and isinstance(produced, torch.Tensor):
        if produced.numel() == 0 and produced.dtype == spec.dtype:
            return produced  # an empty placeholder output (meta kernels size some of them)
        if produced.dtype != spec.dtype or tuple(produced.shape) != tuple(spec.shape):
            raise DecompositionError(
                f"the decomposition of {node.target} produced {produced.dtype}"
                f"{list(produced.shape)} for {value.name}, expected {spec.dtype}{list(spec.shape)}"
            )
    return produced


def _placeholder(tracer: Tracer, value: Value) -> Any:
    spec = value.spec
    if not isinstance(spec, TensorSpec):
        raise DecompositionError(f"input {value.name}: only tensor inputs can be decomposed yet")
    if not spec.is_static():
        # TODO(issue 7): symbolic sizes need the Graph's shape environment rebuilt here.
        raise DecompositionError(f"input {value.name} has symbolic sizes; decompose needs static")
    extent = spec.storage_offset + sum((s - 1) * st for s, st in zip(spec.shape, spec.strides)) + 1
    storage = torch.empty(max(extent, 0) if all(spec.shape) else 0, dtype=spec.dtype, device="meta")
    meta = storage.as_strided(spec.shape, spec.strides, spec.storage_offset)
    return TracerTensor(
        meta, device=spec.device, requires_grad=False, value_name=value.name, owner=tracer
    )


def _bind(arg: Any, env: dict[str, Any]) -> Any:
    if isinstance(arg, Ref):
        return env[arg.name]
    if isinstance(arg, list):
        return [_bind(item, env) for item in arg]
    return arg


def _output_leaf(tracer: Tracer, leaf: Any, env: dict[str, Any]) -> Any:
    if not isinstance(leaf, Ref):
        return leaf
    value = env[leaf.name]
    if isinstance(value, TracerTensor):
        return Ref(value.value_name)
    if isinstance(value, torch.Tensor):
        return tracer.constant(value)
    return value
