"""The Graph verifier: checks every rule of the format on a Graph.

References point at values defined earlier (so the nodes are in topological order and
acyclic), names are unique identifiers, operators resolve and their arguments and outputs
fit their schemas, state inputs have constants of the declared spec, signatures match the
inputs and outputs, every size symbol is declared, and sub-graphs verify in turn.
"""

from __future__ import annotations

import keyword
from collections.abc import Iterator
from typing import Any

import sympy
import torch

from ember.prims.errors import GraphVerificationError
from ember.prims.graph import Graph, InputKind, Node, Ref, SubgraphRef, Value
from ember.prims.ops import op_schema, resolve_op
from ember.prims.specs import ScalarSpec, TensorSpec

_SCALAR_RETURN_KINDS = (
    "IntType",
    "FloatType",
    "BoolType",
    "NumberType",
    "SymIntType",
    "SymFloatType",
    "SymBoolType",
    "ComplexType",
)


def verify(graph: Graph) -> None:
    """Raise GraphVerificationError naming the first broken rule, or return None."""
    _Verifier(graph, path=graph.name).run()


class _Verifier:
    def __init__(self, graph: Graph, path: str) -> None:
        self.graph = graph
        self.path = path
        self.defined: dict[str, Value] = {}

    def fail(self, where: str, message: str) -> None:
        raise GraphVerificationError(f"{self.path}: {where}: {message}")

    def run(self) -> None:
        self._check_inputs()
        for index, node in enumerate(self.graph.nodes):
            self._check_node(index, node)
        self._check_signatures()
        self._check_symbols()
        for name, subgraph in self.graph.subgraphs.items():
            _Verifier(subgraph, path=f"{self.path}.subgraphs[{name}]").run()

    def _define(self, where: str, value: Value) -> None:
        if not value.name.isidentifier() or keyword.iskeyword(value.name):
            self.fail(where, f"value name {value.name!r} is not a Python identifier")
        if value.name in self.defined:
            self.fail(where, f"value {value.name!r} is defined twice")
        if not isinstance(value.spec, (TensorSpec, ScalarSpec)):
            self.fail(where, f"value {value.name!r} has no valid spec")
        self.defined[value.name] = value

    def _check_inputs(self) -> None:
        for index, graph_input in enumerate(self.graph.inputs):
            where = f"inputs[{index}]"
            self._define(where, graph_input.value)
            if not graph_input.is_state:
                continue
            if not graph_input.target:
                self.fail(where, f"{graph_input.kind.value} input has no target name")
            constant = self.graph.constants.get(graph_input.target or "")
            if constant is None:
                if graph_input.kind is InputKind.CONSTANT:
                    self.fail(
                        where, f"constant {graph_input.target!r} is not in the constants table"
                    )
                continue
            spec = graph_input.value.spec
            if isinstance(spec, TensorSpec) and (
                constant.dtype != spec.dtype or tuple(constant.shape) != spec.shape
            ):
                self.fail(
                    where,
                    f"constant {graph_input.target!r} is {constant.dtype}{list(constant.shape)} "
                    f"but the input is declared {spec.short()}",
                )

    def _check_node(self, index: int, node: Node) -> None:
        where = f"nodes[{index}] ({node.target})"
        try:
            resolve_op(node.target)
        except (KeyError, ValueError) as error:
            self.fail(where, str(error))
        for ref in _refs(node.args, node.kwargs):
            self._check_ref(where, ref)
        schema = op_schema(node.target)
        if schema is not None:
            self._check_schema(where, node, schema)
        for position, output in enumerate(node.outputs):
            if isinstance(output, Value):
                self._define(f"{where} output {position}", output)
            elif isinstance(output, list):
                for value in output:
                    self._define(f"{where} output {position}", value)
            elif output is not None:
                self.fail(where, f"output {position} is neither a value, a list nor None")

    def _check_ref(self, where: str, ref: Ref | SubgraphRef) -> None:
        if isinstance(ref, SubgraphRef):
            if ref.name not in self.graph.subgraphs:
                self.fail(where, f"sub-graph {ref.name!r} is not in the sub-graph table")
        elif ref.name not in self.defined:
            self.fail(where, f"{ref.name!r} is used before it is defined (or never defined)")

    def _check_schema(self, where: str, node: Node, schema: torch.FunctionSchema) -> None:
        positional = [a for a in schema.arguments if not a.kwarg_only]
        if len(node.args) > len(positional):
            self.fail(
                where,
                f"{len(node.args)} positional arguments, the schema takes "
                f"{len(positional)}: {schema}",
            )
        names = {a.name for a in schema.arguments}
        for key in node.kwargs:
            if key not in names:
                self.fail(where, f"unknown keyword argument {key!r} for {schema}")
        if len(node.outputs) != len(schema.returns):
            self.fail(
                where,
                f"{len(node.outputs)} outputs, the schema returns {len(schema.returns)}: {schema}",
            )
        for position, (ret, output) in enumerate(zip(schema.returns, node.outputs)):
            kind = ret.type.kind()
            # None: an undefined tensor, as backward ops return for outputs their mask skips.
            if kind == "TensorType" and not (
                output is None
                or (isinstance(output, Value) and isinstance(output.spec, TensorSpec))
            ):
                self.fail(where, f"output {position} must be a tensor value")
            if kind == "ListType" and not isinstance(output, list):
                self.fail(where, f"output {position} must be a list of values")
            if kind == "OptionalType" and output is not None and not isinstance(output, Value):
                self.fail(where, f"output {position} must be a value or None")
            if kind in _SCALAR_RETURN_KINDS and not (
                isinstance(output, Value) and isinstance(output.spec, ScalarSpec)
            ):
                self.fail(where, f"output {position} must be a scalar value")

    def _check_signatures(self) -> None:
        graph = self.graph
        if graph.in_spec.num_leaves != len(graph.input_leaves):
            self.fail(
                "in_spec",
                f"{graph.in_spec.num_leaves} leaves in the spec, {len(graph.input_leaves)} given",
            )
        users = {gi.value.name for gi in graph.user_inputs()}
        placed = [leaf.name for leaf in graph.input_leaves if isinstance(leaf, Ref)]
        if sorted(placed) != sorted(users):
            self.fail(
                "input_leaves",
                "the input signature must place every user input once "
                f"(places {placed}, user inputs {sorted(users)})",
            )
        if graph.out_spec.num_leaves != len(graph.output_leaves):
            self.fail(
                "out_spec",
                f"{graph.out_spec.num_leaves} leaves in the spec, {len(graph.output_leaves)} given",
            )
        for ref in _refs(graph.output_leaves, {}):
            self._check_ref("outputs", ref)

    def _check_symbols(self) -> None:
        declared = set(self.graph.symbols)
        for name, info in self.graph.symbols.items():
            if info.name != name:
                self.fail(f"symbols[{name}]", f"declared under the name {info.name!r}")
            if info.upper is not None and info.upper < info.lower:
                self.fail(f"symbols[{name}]", f"empty range [{info.lower}, {info.upper}]")
        for where, expr in self._expressions():
            unknown = {str(s) for s in expr.free_symbols} - declared
            if unknown:
                self.fail(
                    where, f"size expression {expr} uses undeclared symbols {sorted(unknown)}"
                )

    def _expressions(self) -> Iterator[tuple[str, sympy.Basic]]:
        for name, value in self.defined.items():
            spec = value.spec
            sizes: tuple[Any, ...] = ()
            if isinstance(spec, TensorSpec):
                sizes = (*spec.shape, *spec.strides, spec.storage_offset)
            elif spec.expr is not None:
                sizes = (spec.expr,)
            for size in sizes:
                if isinstance(size, sympy.Basic):
                    yield f"value {name}", size
        for index, node in enumerate(self.graph.nodes):
            for arg in _leaves(node.args, node.kwargs):
                if isinstance(arg, sympy.Basic):
                    yield f"nodes[{index}]", arg
        for index, guard in enumerate(self.graph.guards):
            yield f"guards[{index}]", guard.expr


def _leaves(args: list[Any], kwargs: dict[str, Any]) -> Iterator[Any]:
    stack: list[Any] = [*args, *kwargs.values()]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            yield item


def _refs(args: list[Any], kwargs: dict[str, Any]) -> Iterator[Ref | SubgraphRef]:
    for leaf in _leaves(args, kwargs):
        if isinstance(leaf, (Ref, SubgraphRef)):
            yield leaf
