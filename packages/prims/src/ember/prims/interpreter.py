"""The interpreter: runs a Graph with eager torch, one ATen call per node.

`run(graph, *inputs)` takes the user inputs as the traced function took them (pytrees
included) and binds state inputs (parameters, buffers, constants) from the constants table
unless they are passed in `state`. Size symbols are bound from the inputs' sizes and the
Graph's guards are checked before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sympy
import torch

from ember.prims.autocast import autocast_disabled, autocast_enabled
from ember.prims.errors import InterpreterError
from ember.prims.graph import Graph, InputKind, Node, Ref, SubgraphRef, Value
from ember.prims.ops import resolve_op
from ember.prims.pytree import tree_flatten, tree_unflatten
from ember.prims.specs import TensorSpec


class Interpreter:
    """A Graph prepared for repeated execution."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._ops: list[Callable[..., Any]] = [resolve_op(node.target) for node in graph.nodes]
        self._user_inputs = {gi.value.name: gi for gi in graph.user_inputs()}
        self._symbolic = bool(graph.symbols)

    def __call__(self, *inputs: Any, state: Mapping[str, torch.Tensor] | None = None) -> Any:
        if autocast_enabled():  # the Graph holds its casts already
            with autocast_disabled():
                return self._run(inputs, state)
        return self._run(inputs, state)

    def _run(self, inputs: tuple[Any, ...], state: Mapping[str, torch.Tensor] | None) -> Any:
        env: dict[str, Any] = {}
        bindings: dict[sympy.Symbol, int] = {}
        self._bind_user_inputs(inputs, env, bindings)
        self._bind_state(state or {}, env)
        if self._symbolic:
            self._check_guards(bindings)
        for node, op in zip(self.graph.nodes, self._ops):
            args = [_materialize(a, env, bindings, self.graph) for a in node.args]
            kwargs = {k: _materialize(a, env, bindings, self.graph) for k, a in node.kwargs.items()}
            try:
                result = op(*args, **kwargs)
            except Exception as error:
                raise InterpreterError(f"{_describe(node)} failed: {error}") from error
            _store(node, result, env)
        leaves = [
            _materialize(leaf, env, bindings, self.graph) for leaf in self.graph.output_leaves
        ]
        return tree_unflatten(leaves, self.graph.out_spec)

    def _bind_user_inputs(
        self, inputs: tuple[Any, ...], env: dict[str, Any], bindings: dict[sympy.Symbol, int]
    ) -> None:
        leaves, spec = tree_flatten(inputs)
        if spec != self.graph.in_spec:
            raise InterpreterError(
                f"the Graph {self.graph.name} takes inputs shaped {self.graph.in_spec}, "
                f"got {spec}; pass the inputs the traced function took"
            )
        for expected, actual in zip(self.graph.input_leaves, leaves):
            if not isinstance(expected, Ref):
                if not _same_literal(expected, actual):
                    raise InterpreterError(
                        f"the Graph {self.graph.name} was traced with the constant input "
                        f"{expected!r} and specialized on it; got {actual!r}. Trace again "
                        "with this value."
                    )
                continue
            graph_input = self._user_inputs[expected.name]
            _check_tensor(graph_input.value, actual, bindings)
            env[expected.name] = actual

    def _bind_state(self, state: Mapping[str, torch.Tensor], env: dict[str, Any]) -> None:
        for graph_input in self.graph.state_inputs():
            target = graph_input.target or graph_input.value.name
            if graph_input.kind is not InputKind.CONSTANT and target in state:
                env[graph_input.value.name] = state[target]
            elif target in self.graph.constants:
                env[graph_input.value.name] = self.graph.constants[target]
            else:
                raise InterpreterError(
                    f"no value for {graph_input.kind.value} {target!r}: it is not in the "
                    "Graph's constants table; pass it in state={...}"
                )

    def _check_guards(self, bindings: dict[sympy.Symbol, int]) -> None:
        for guard in self.graph.guards:
            holds = guard.expr.xreplace(bindings)
            if holds is sympy.false or holds is False:
                where = f" (assumed at {guard.source.short()})" if guard.source else ""
                values = ", ".join(f"{s}={v}" for s, v in bindings.items())
                raise InterpreterError(
                    f"the inputs break the Graph's size guard {guard.expr}{where} with "
                    f"{values}; trace again with inputs of these sizes"
                )


def run(graph: Graph, *inputs: Any, state: Mapping[str, torch.Tensor] | None = None) -> Any:
    """Run `graph` on `inputs` with eager torch and return its outputs."""
    return Interpreter(graph)(*inputs, state=state)


def _check_tensor(value: Value, actual: Any, bindings: dict[sympy.Symbol, int]) -> None:
    spec = value.spec
    if not isinstance(spec, TensorSpec):
        return
    if not isinstance(actual, torch.Tensor):
        raise InterpreterError(f"input {value.name} must be a tensor, got {type(actual).__name__}")
    if actual.dtype != spec.dtype or actual.dim() != spec.ndim:
        raise InterpreterError(
            f"input {value.name} must be {spec.short()}, got "
            f"{actual.dtype} with {actual.dim()} dims"
        )
    for dim, (expected, size) in enumerate(zip(spec.shape, actual.shape)):
        if isinstance(expected, int):
            if expected != size:
                raise InterpreterError(
                    f"input {value.name} must have size {expected} in dim {dim}, got {size}; "
                    "trace with dynamic=True to allow other sizes"
                )
        elif isinstance(expected, sympy.Symbol):
            bound = bindings.setdefault(expected, int(size))
            if bound != size:
                raise InterpreterError(
                    f"input {value.name} dim {dim} is {size} but {expected} is already {bound}"
                )


def _materialize(
    arg: Any, env: dict[str, Any], bindings: dict[sympy.Symbol, int], graph: Graph
) -> Any:
    if isinstance(arg, Ref):
        return env[arg.name]
    if isinstance(arg, list):
        return [_materialize(item, env, bindings, graph) for item in arg]
    if isinstance(arg, sympy.Basic):
        value = sympy.sympify(arg.xreplace(bindings))  # a bare Symbol becomes a Python int
        if value.is_Integer:
            return int(value)
        if value is sympy.true or value is sympy.false:
            return bool(value)
        if value.is_Number:
            return float(value)
        raise InterpreterError(f"size expression {arg} has unbound symbols {value.free_symbols}")
    if isinstance(arg, SubgraphRef):
        return graph.subgraphs[arg.name]
    return arg


def _store(node: Node, result: Any, env: dict[str, Any]) -> None:
    if not node.outputs:
        return  # an op run for its checks or effects only
    results = (result,) if len(node.outputs) == 1 else tuple(result)
    for output, produced in zip(node.outputs, results):
        if isinstance(output, Value):
            env[output.name] = produced
        elif isinstance(output, list):
            for value, item in zip(output, produced):
                env[value.name] = item


def _same_literal(expected: Any, actual: Any) -> bool:
    return type(expected) is type(actual) and (expected == actual or repr(expected) == repr(actual))


def _describe(node: Node) -> str:
    where = f" at {node.source}" if node.source is not None else ""
    return f"{node.target}{where}"


__all__ = ["Interpreter", "run"]
