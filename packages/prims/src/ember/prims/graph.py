"""The ember Graph: the one data format every layer reads and writes.

A Graph is plain data: inputs (user inputs and named state such as parameters), SSA nodes in
topological order that name their operator by qualified name, pytree signatures for inputs
and outputs, declared size symbols with the guards that constrain them, a constants table
and a sub-graph table. No callables, no live objects: `dumps`/`loads` round-trip it exactly.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Union

import sympy
import torch

from ember.prims.pytree import TreeSpec
from ember.prims.source import SourceLocation
from ember.prims.specs import Spec, SymbolInfo, TensorSpec


@dataclass(frozen=True)
class Ref:
    """A reference to a value by name, used in node arguments and in signatures."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class SubgraphRef:
    """A reference to an entry of the Graph's sub-graph table (for control-flow ops)."""

    name: str


# A node argument: a reference, a literal of any kind ATen schemas take, or a list of them.
# Literals: None, bool, int, float, complex, str, torch.dtype, torch.device, torch.layout,
# torch.memory_format, and sympy expressions for symbolic ints, floats and bools.
Arg = Any

# What one schema return of a node produced: a value, a list of values (Tensor[]), or None.
Output = Union["Value", list["Value"], None]


@dataclass(frozen=True)
class Value:
    """A named SSA value and its spec."""

    name: str
    spec: Spec


class InputKind(str, enum.Enum):
    """Where an input's value comes from when the Graph runs."""

    USER = "user"  # passed by the caller, placed by the input signature
    PARAMETER = "parameter"  # module parameter; bound from the constants table by default
    BUFFER = "buffer"  # module buffer; bound from the constants table by default
    CONSTANT = "constant"  # a tensor literal met while tracing; always from the constants table


@dataclass(frozen=True)
class GraphInput:
    """One input of a Graph. State inputs name their entry in the constants table (`target`)."""

    value: Value
    kind: InputKind = InputKind.USER
    target: str | None = None  # qualified name (`l1.weight`) for state inputs

    @property
    def is_state(self) -> bool:
        return self.kind is not InputKind.USER


@dataclass
class Node:
    """One operator call. `outputs` is aligned with the operator's schema returns."""

    target: str
    args: list[Arg]
    kwargs: dict[str, Arg]
    outputs: list[Output]
    source: SourceLocation | None = None

    def output_values(self) -> Iterator[Value]:
        for output in self.outputs:
            if isinstance(output, Value):
                yield output
            elif isinstance(output, list):
                yield from output


@dataclass(frozen=True)
class ShapeGuard:
    """A condition over size symbols that a size decision during tracing assumed."""

    expr: sympy.Basic
    source: SourceLocation | None = None


@dataclass(eq=False)
class Graph:
    """A captured program. See docs/graph-format.md for every field's meaning."""

    inputs: list[GraphInput] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    # User inputs: the structure of the call's args, leaves are Refs to USER inputs or literals.
    in_spec: TreeSpec = field(default_factory=lambda: TreeSpec("tuple"))
    input_leaves: list[Arg] = field(default_factory=list)
    # Outputs: the structure of the result, leaves are Refs or literals.
    out_spec: TreeSpec = field(default_factory=lambda: TreeSpec("leaf"))
    output_leaves: list[Arg] = field(default_factory=lambda: [None])
    symbols: dict[str, SymbolInfo] = field(default_factory=dict)
    guards: list[ShapeGuard] = field(default_factory=list)
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    subgraphs: dict[str, Graph] = field(default_factory=dict)
    name: str = "forward"
    # Free-form provenance (the pass that made this graph, its time); strings only.
    meta: dict[str, str] = field(default_factory=dict)

    # ---- queries -------------------------------------------------------------------------

    def values(self) -> dict[str, Value]:
        """Every value by name: inputs first, then node outputs in order."""
        table = {graph_input.value.name: graph_input.value for graph_input in self.inputs}
        for node in self.nodes:
            for value in node.output_values():
                table[value.name] = value
        return table

    def user_inputs(self) -> list[GraphInput]:
        return [graph_input for graph_input in self.inputs if not graph_input.is_state]

    def state_inputs(self) -> list[GraphInput]:
        return [graph_input for graph_input in self.inputs if graph_input.is_state]

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.target] = counts.get(node.target, 0) + 1
        return counts

    def input_specs(self) -> list[TensorSpec | Spec]:
        return [graph_input.value.spec for graph_input in self.inputs]

    # ---- behaviour shared by every layer ---------------------------------------------------

    def verify(self) -> None:
        """Raise GraphVerificationError if the Graph breaks a rule of the format."""
        from ember.prims.verify import verify

        verify(self)

    def __str__(self) -> str:
        from ember.prims.printer import format_graph

        return format_graph(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (
            self.inputs == other.inputs
            and self.nodes == other.nodes
            and self.in_spec == other.in_spec
            and _leaves_equal(self.input_leaves, other.input_leaves)
            and self.out_spec == other.out_spec
            and _leaves_equal(self.output_leaves, other.output_leaves)
            and self.symbols == other.symbols
            and self.guards == other.guards
            and self.subgraphs == other.subgraphs
            and self.name == other.name
            and self.meta == other.meta
            and _constants_equal(self.constants, other.constants)
        )

    __hash__ = None  # type: ignore[assignment]


def _leaves_equal(left: list[Arg], right: list[Arg]) -> bool:
    # float('nan') literals compare unequal to themselves; compare their reprs instead.
    return len(left) == len(right) and all(
        a == b or (type(a) is type(b) and repr(a) == repr(b)) for a, b in zip(left, right)
    )


def _constants_equal(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> bool:
    if left.keys() != right.keys():
        return False
    for key, a in left.items():
        b = right[key]
        if a.dtype != b.dtype or a.shape != b.shape or a.requires_grad != b.requires_grad:
            return False
        if not torch.equal(a.detach().cpu(), b.detach().cpu()):
            # NaNs are equal to themselves in a round trip; compare bit patterns.
            if not torch.equal(_bits(a), _bits(b)):
                return False
    return True


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat
