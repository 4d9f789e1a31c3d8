"""Alias and mutation analysis of a Graph: which storage each value lives in, and who writes it.

`analyze_aliasing(graph)` follows the alias annotations of each op's schema (`Tensor(a)` views,
`Tensor(a!)` writes) to give every tensor value a storage root, then reports the graph inputs
written in place (directly or through a view), the outputs that alias an input, and the outputs
that alias each other. Functionalization and the graph passes build on it; the rules are in the
package README.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ember.autodiff.errors import AliasAnalysisError
from ember.prims import Graph, InputKind, Node, Ref, TensorSpec, Value, resolve_op
from ember.prims.ops import op_schema


@dataclass(frozen=True)
class Write:
    """One in-place write: node `node` (index into graph.nodes) writes value `value`."""

    node: int
    value: str
    storage: str  # the storage root of `value`
    metadata: bool  # an `inplace_view` op: changes sizes/strides (t_, resize_), not only data


@dataclass(frozen=True)
class InputMutation:
    """A graph input whose storage the Graph writes in place."""

    input: str  # the input's value name
    kind: InputKind
    target: str | None  # the constants-table name of a state input (`bn.running_mean`)
    nodes: tuple[int, ...]  # the writing nodes, in order
    through_view: bool  # at least one write went through a view of the input
    mutates_data: bool
    mutates_metadata: bool


@dataclass(frozen=True)
class OutputAlias:
    """An output (index into graph.output_leaves) that shares storage with a graph input."""

    output: int
    input: str
    is_view: bool  # False: the output is the input tensor itself (e.g. returned after `x.add_`)


@dataclass(frozen=True)
class AliasInfo:
    """The result of `analyze_aliasing`.

    `storage` maps every tensor value to its storage root: the graph input it lives in, or the
    value of the node that allocated it. `views` holds the values that are views of their root
    rather than the root tensor itself.
    """

    storage: Mapping[str, str]
    views: frozenset[str]
    writes: tuple[Write, ...]
    mutated_inputs: tuple[InputMutation, ...]
    output_aliases: tuple[OutputAlias, ...]
    aliased_outputs: tuple[tuple[int, ...], ...]  # groups of output indices sharing storage
    _by_node: dict[int, tuple[Write, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_node: dict[int, list[Write]] = {}
        for write in self.writes:
            by_node.setdefault(write.node, []).append(write)
        object.__setattr__(self, "_by_node", {k: tuple(v) for k, v in by_node.items()})

    def writes_of(self, node: int) -> tuple[Write, ...]:
        """The writes node number `node` performs (empty for a node that writes nothing)."""
        return self._by_node.get(node, ())

    def written_storages(self) -> frozenset[str]:
        """Every storage root some node writes."""
        return frozenset(write.storage for write in self.writes)

    def is_mutated(self, input_name: str) -> bool:
        return any(mutation.input == input_name for mutation in self.mutated_inputs)


# Ops whose schema does not declare writes they do perform: qualified name -> a function of
# the node's (args, kwargs) returning the positions of the arguments written. The batch-norm
# family updates running_mean/running_var in training mode but predates alias annotations.
def _batch_norm_running_stats(args: list[Any], kwargs: dict[str, Any]) -> tuple[int, ...]:
    training = args[5] if len(args) > 5 else kwargs.get("training", False)
    return (3, 4) if training is not False else ()


UNDECLARED_WRITES: dict[str, Callable[[list[Any], dict[str, Any]], tuple[int, ...]]] = {
    "aten::native_batch_norm.default": _batch_norm_running_stats,
    "aten::cudnn_batch_norm.default": _batch_norm_running_stats,
    "aten::miopen_batch_norm.default": _batch_norm_running_stats,
}


def analyze_aliasing(graph: Graph) -> AliasInfo:
    """Storage roots, in-place writes, mutated inputs and output aliasing of `graph`."""
    storage: dict[str, str] = {}
    views: set[str] = set()
    for graph_input in graph.inputs:
        storage[graph_input.value.name] = graph_input.value.name
    writes: list[Write] = []
    for index, node in enumerate(graph.nodes):
        writes.extend(_node_writes(index, node, storage))
        _assign_outputs(node, storage, views)
    return AliasInfo(
        storage=storage,
        views=frozenset(views),
        writes=tuple(writes),
        mutated_inputs=_mutated_inputs(graph, writes, views),
        output_aliases=_output_aliases(graph, storage, views),
        aliased_outputs=_aliased_outputs(graph, storage),
    )


# ---- per node ------------------------------------------------------------------------------


def _node_writes(index: int, node: Node, storage: Mapping[str, str]) -> list[Write]:
    schema = _schema(node)
    if schema is None:
        return []  # a registered op without a schema: nothing declares a write
    metadata = torch.Tag.inplace_view in getattr(resolve_op(node.target), "tags", ())
    written: list[Ref] = []
    for position, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is not None and info.is_write:
            written.extend(_refs(_argument(node, position, argument.name)))
    undeclared = UNDECLARED_WRITES.get(node.target)
    if undeclared is not None:
        for position in undeclared(node.args, node.kwargs):
            written.extend(_refs(_argument(node, position, schema.arguments[position].name)))
    return [Write(index, ref.name, _root(ref, node, storage), metadata) for ref in written]


def _assign_outputs(node: Node, storage: dict[str, str], views: set[str]) -> None:
    schema = _schema(node)
    returns = list(schema.returns) if schema is not None else []
    for position, output in enumerate(node.outputs):
        if output is None:
            continue
        source = (
            _aliased_argument(node, schema, returns[position]) if position < len(returns) else None
        )
        values = output if isinstance(output, list) else [output]
        for value in values:
            if not _is_tensor(value):
                continue
            if source is None:
                storage[value.name] = value.name  # fresh storage
                continue
            ref, is_write = source
            storage[value.name] = _root(ref, node, storage)
            # A write returns its argument itself; a view return is a new view of it.
            if not is_write or ref.name in views:
                views.add(value.name)


def aliased_position(schema: Any, ret: Any) -> int | None:
    """The argument position a schema return aliases (a view or a write), or None if fresh."""
    if schema is None or ret.alias_info is None:
        return None
    alias = ret.alias_info
    for position, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None:
            continue
        # `Tensor(a)` returns share a set with their argument; `Tensor(a)[]` returns (split,
        # unbind) carry their set on the element type, which the Python schema does not show:
        # they alias the argument annotated `Tensor(a -> *)`.
        if (alias.before_set & info.before_set) or (not alias.before_set and "*" in info.after_set):
            return position
    return None


def _aliased_argument(
    node: Node, schema: torch.FunctionSchema | None, ret: torch.Argument
) -> tuple[Ref, bool] | None:
    """The argument a schema return aliases (and whether it is a write), or None if fresh."""
    position = aliased_position(schema, ret)
    if position is None or schema is None or ret.alias_info is None:
        return None
    refs = _refs(_argument(node, position, schema.arguments[position].name))
    return (refs[0], bool(ret.alias_info.is_write)) if len(refs) == 1 else None


# ---- whole-graph results -------------------------------------------------------------------


def _mutated_inputs(
    graph: Graph, writes: list[Write], views: set[str]
) -> tuple[InputMutation, ...]:
    by_input: dict[str, list[Write]] = {}
    for write in writes:
        by_input.setdefault(write.storage, []).append(write)
    mutations: list[InputMutation] = []
    for graph_input in graph.inputs:
        name = graph_input.value.name
        found = by_input.get(name)
        if not found:
            continue
        mutations.append(
            InputMutation(
                input=name,
                kind=graph_input.kind,
                target=graph_input.target,
                nodes=tuple(dict.fromkeys(write.node for write in found)),
                through_view=any(write.value in views for write in found),
                mutates_data=any(not write.metadata for write in found),
                mutates_metadata=any(write.metadata for write in found),
            )
        )
    return tuple(mutations)


def _output_aliases(
    graph: Graph, storage: Mapping[str, str], views: set[str]
) -> tuple[OutputAlias, ...]:
    inputs = {graph_input.value.name for graph_input in graph.inputs}
    aliases: list[OutputAlias] = []
    for index, leaf in enumerate(graph.output_leaves):
        if isinstance(leaf, Ref) and storage.get(leaf.name) in inputs:
            aliases.append(OutputAlias(index, storage[leaf.name], leaf.name in views))
    return tuple(aliases)


def _aliased_outputs(graph: Graph, storage: Mapping[str, str]) -> tuple[tuple[int, ...], ...]:
    groups: dict[str, list[int]] = {}
    for index, leaf in enumerate(graph.output_leaves):
        if isinstance(leaf, Ref) and leaf.name in storage:
            groups.setdefault(storage[leaf.name], []).append(index)
    return tuple(tuple(group) for group in groups.values() if len(group) > 1)


# ---- helpers -------------------------------------------------------------------------------


def _schema(node: Node) -> torch.FunctionSchema | None:
    try:
        return op_schema(node.target)
    except (KeyError, ValueError) as error:
        raise AliasAnalysisError(
            f"{_where(node)}unknown operator {node.target}: nothing says what it reads and "
            "writes; import the package that defines it, or register it with "
            "ember.prims.register_op"
        ) from error


def _where(node: Node) -> str:
    return f"{node.source}: " if node.source is not None else ""


def _argument(node: Node, position: int, name: str) -> Any:
    if position < len(node.args):
        return node.args[position]
    return node.kwargs.get(name)


def _refs(arg: Any) -> list[Ref]:
    if isinstance(arg, Ref):
        return [arg]
    if isinstance(arg, list):
        return [item for item in arg if isinstance(item, Ref)]
    return []


def _root(ref: Ref, node: Node, storage: Mapping[str, str]) -> str:
    root = storage.get(ref.name)
    if root is None:
        raise AliasAnalysisError(
            f"{_where(node)}{node.target} reads {ref.name}, which no earlier node or input defines; run "
            "Graph.verify() to find the malformed reference"
        )
    return root


def _is_tensor(value: Value) -> bool:
    return isinstance(value.spec, TensorSpec)
