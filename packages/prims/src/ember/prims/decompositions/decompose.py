"""`decompose(graph, table)`: replace every node whose operator has an entry in `table` by the
nodes its decomposition records, keeping the node's user source location on each of them.

Each round re-traces the whole Graph with a fresh Tracer (so every spec is recomputed);
decompositions that call other ATen ops are expanded in the following rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import sympy
import torch

from ember.prims.errors import PrimsError
from ember.prims.graph import Graph, Node, Ref, Value
from ember.prims.ops import resolve_op
from ember.prims.primitives.recording import recording_into
from ember.prims.specs import TensorSpec
from ember.prims.symbolic.shape_env import ShapeEnv
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
    tracer = Tracer(_shape_env(graph))
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
    if tracer.shape_env is not None:
        # a decomposition's size decisions are guards the Graph did not have: the caller
        # sees them (`len(new.guards) > len(graph.guards)`) and decides what holds
        new.guards = list(tracer.shape_env.guards)
    return new


def _shape_env(graph: Graph) -> ShapeEnv | None:
    """The Graph's size symbols and guards rebuilt, for a re-trace over the same symbols."""
    if not graph.symbols:
        return None
    try:
        return ShapeEnv.rebuilt(graph.symbols, graph.guards)
    except ValueError as error:
        raise DecompositionError(f"cannot decompose {graph.name}: {error}") from error


def _retrace_node(
    tracer: Tracer, node: Node, table: Mapping[str, Callable[..., Any]], env: dict[str, Any]
) -> None:
    fn = table.get(node.target) or resolve_op(node.target)
    args = [_bind(a, env, tracer) for a in node.args]
    kwargs = {key: _bind(a, env, tracer) for key, a in node.kwargs.items()}
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
            env[output.name] = _checked(tracer, node, output, produced)
        elif isinstance(output, list):
            for value, item in zip(output, produced):
                env[value.name] = _checked(tracer, node, value, item)


def _checked(tracer: Tracer, node: Node, value: Value, produced: Any) -> Any:
    spec = value.spec
    if isinstance(spec, TensorSpec) and isinstance(produced, torch.Tensor):
        shape = tuple(_expr(tracer, size) for size in produced.shape)
        if 0 in shape and produced.dtype == spec.dtype:
            return produced  # an empty placeholder output (meta kernels size some of them)
        # the rebuilt environment knows every guard from the start (s1 == s0 replaces s1
        # even in sizes recorded before the guard was)
        declared = [_known(tracer, size) for size in spec.shape]
        same = len(shape) == len(declared) and all(
            _same_size(tracer, a, b) for a, b in zip(shape, declared)
        )
        if produced.dtype != spec.dtype or not same:
            raise DecompositionError(
                f"the decomposition of {node.target} produced {produced.dtype}"
                f"{list(produced.shape)} for {value.name}, expected {spec.dtype}{list(spec.shape)}"
            )
    return produced


def _expr(tracer: Tracer, size: Any) -> Any:
    """A size as a sympy expression or int, never deciding anything about it."""
    if isinstance(size, torch.SymInt) and tracer.shape_env is not None:
        return tracer.shape_env.to_sympy(size)
    return int(size)


def _same_size(tracer: Tracer, a: Any, b: Any) -> bool:
    """Whether two sizes are equal for every integer value of their symbols. sympy does not
    see that `ceiling(s0/2)` is `floor(s0/2 + 1/2)` or that `ceiling(s1/2 - 3/2) + 1` is
    `floor(s1/2)` (a pooling's output size written by its meta rule and by its
    decomposition): expressions that sympy cannot subtract to 0 are compared at the symbols'
    hints and at a spread of other sizes in their ranges."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    difference = sympy.expand(a - b)
    if difference == 0:
        return True
    symbols = sorted(difference.free_symbols, key=str)
    env = tracer.shape_env
    if not symbols or env is None:
        return False
    for point in range(48):
        values = {}
        for position, sym in enumerate(symbols):
            info = env.symbols.get(str(sym))
            lower = info.lower if info is not None else 0
            hint = info.hint if info is not None and info.hint is not None else lower
            value = hint if point == 0 else lower + (point * (2 * position + 3) + position) % 61
            if info is not None and info.upper is not None:
                value = min(value, info.upper)
            values[sym] = sympy.Integer(value)
        if sympy.simplify(difference.xreplace(values)) != 0:
            return False
    return True


def _known(tracer: Tracer, size: Any) -> Any:
    if isinstance(size, sympy.Basic) and tracer.shape_env is not None:
        return tracer.shape_env.replace(size)
    return size


def _placeholder(tracer: Tracer, value: Value) -> Any:
    spec = value.spec
    if not isinstance(spec, TensorSpec):
        raise DecompositionError(f"input {value.name}: only tensor inputs can be decomposed yet")
    if not spec.is_static():
        env = tracer.shape_env
        assert env is not None  # a Graph with symbolic sizes has a rebuilt environment
        shape = [env.to_symint(s) for s in spec.shape]
        strides = [env.to_symint(s) for s in spec.strides]
        symbolic = torch.empty_strided(shape, strides, dtype=spec.dtype, device="meta")
        if spec.storage_offset != 0:
            offset = env.to_symint(spec.storage_offset)
            symbolic = symbolic.as_strided(shape, strides, offset)
        return TracerTensor(
            symbolic, device=spec.device, requires_grad=False, value_name=value.name, owner=tracer
        )
    extent = spec.storage_offset + sum((s - 1) * st for s, st in zip(spec.shape, spec.strides)) + 1
    storage = torch.empty(max(extent, 0) if all(spec.shape) else 0, dtype=spec.dtype, device="meta")
    meta = storage.as_strided(spec.shape, spec.strides, spec.storage_offset)
    return TracerTensor(
        meta, device=spec.device, requires_grad=False, value_name=value.name, owner=tracer
    )


def _bind(arg: Any, env: dict[str, Any], tracer: Tracer) -> Any:
    if isinstance(arg, Ref):
        return env[arg.name]
    if isinstance(arg, list):
        return [_bind(item, env, tracer) for item in arg]
    if isinstance(arg, sympy.Basic) and tracer.shape_env is not None:
        # a size expression argument (view sizes, a slice end) as the op takes it
        shape_env = tracer.shape_env
        if not isinstance(arg, sympy.Expr):
            return shape_env.to_symbool(arg)
        return shape_env.to_symint(arg) if arg.is_integer else shape_env.to_symfloat(arg)
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
