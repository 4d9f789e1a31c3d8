"""Splitting one captured Graph into consecutive pieces, and running the pieces in order.

`split_graph(graph, starts)` cuts `graph.nodes` before each index in `starts`. Each piece is
a complete Graph of its own (flat tuple of inputs, flat tuple of outputs) that a backend
compiles on its own; `SplitGraph` binds the original call's inputs, runs the compiled
pieces one after another, passing the values each needs, and rebuilds the original output.
With an autograd backend each piece is its own autograd node, so the backward of a later
piece finishes (and its parameters' gradients are ready) before an earlier piece's starts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ember.capture.distributed.sizes import bound_by, size_carriers
from ember.prims import Graph, GraphInput, Node, Ref, SubgraphRef, TensorSpec, Value, resolve_op
from ember.prims.pytree import LEAF, TreeSpec, tree_flatten, tree_unflatten
from ember.prims.symbolic.evaluate import evaluate_expr


@dataclass(frozen=True)
class Piece:
    """One piece of a split Graph: its Graph and the names of the values it reads and makes
    (names of the original Graph, in the piece's input and output order)."""

    graph: Graph
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def split_graph(graph: Graph, starts: Sequence[int]) -> list[Piece]:
    """`graph` cut before each node index in `starts` (sorted, each in 1..len(nodes)-1)."""
    bounds = [0, *starts, len(graph.nodes)]
    segments = [graph.nodes[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    produced_in: dict[str, int] = {}
    for index, segment in enumerate(segments):
        for node in segment:
            for value in node.output_values():
                produced_in[value.name] = index
    reads = [_reads(segment) for segment in segments]
    # a value leaves its piece when a later piece reads it or the Graph returns it
    needed_later: list[list[str]] = [[] for _ in segments]
    for index, names in enumerate(reads):
        for name in names:
            home = produced_in.get(name)
            if home is not None and home != index and name not in needed_later[home]:
                needed_later[home].append(name)
    for leaf in graph.output_leaves:
        if isinstance(leaf, Ref) and leaf.name in produced_in:
            home = produced_in[leaf.name]
            if leaf.name not in needed_later[home]:
                needed_later[home].append(leaf.name)
    values = graph.values()
    state = {gi.value.name: gi for gi in graph.state_inputs()}
    pieces: list[Piece] = []
    for index, segment in enumerate(segments):
        inputs = [name for name in reads[index] if produced_in.get(name, -1) != index]
        outputs = needed_later[index]
        if graph.symbols:
            inputs += size_carriers(graph, segment, inputs, outputs, values)
        piece = _piece_graph(graph, index, len(segments), segment, inputs, outputs, values, state)
        user = tuple(name for name in inputs if name not in state)
        pieces.append(Piece(piece, user, tuple(outputs)))
    return pieces


def without_cross_mutation(graph: Graph, starts: Sequence[int]) -> list[int]:
    """`starts` less the cuts between a value and an in-place write to it (or to a view of
    it) in a later piece. Such a write would change a tensor the earlier piece's backward
    saved (`h += block(h)` across a cut fails autograd's version check); in one piece the
    backend functionalizes it. Writes to the Graph's own inputs are left as eager runs them."""
    kept = sorted(starts)
    roots: dict[str, str] = {}  # value -> the value whose storage it views or writes
    produced: dict[str, int] = {}  # value -> index of the node that made it
    for index, node in enumerate(graph.nodes):
        schema = getattr(resolve_op(node.target), "_schema", None)
        written_roots: list[str] = []
        sets: dict[str, str] = {}  # alias set -> root of the argument in it
        if schema is not None:
            for position, argument in enumerate(schema.arguments):
                value = _argument(node, position, argument.name)
                info = argument.alias_info
                if info is None or not isinstance(value, Ref):
                    continue
                root = roots.get(value.name, value.name)
                for alias_set in info.before_set:
                    sets[alias_set] = root
                if info.is_write:
                    written_roots.append(root)
        for position, output in enumerate(node.outputs):
            if not isinstance(output, Value):
                continue
            produced[output.name] = index
            info = schema.returns[position].alias_info if schema is not None else None
            if info is not None:
                base = next((sets[a] for a in info.before_set if a in sets), None)
                if base is not None:
                    roots[output.name] = base
        for root in written_roots:
            origin = produced.get(root)
            if origin is not None:  # a node's value, not a Graph input
                kept = [start for start in kept if not origin < start <= index]
    return kept


def _argument(node: Node, position: int, name: str) -> Any:
    if position < len(node.args):
        return node.args[position]
    return node.kwargs.get(name)


def _piece_graph(
    graph: Graph,
    index: int,
    count: int,
    segment: list[Node],
    inputs: list[str],
    outputs: list[str],
    values: dict[str, Value],
    state: dict[str, GraphInput],
) -> Graph:
    graph_inputs = [state.get(name) or GraphInput(values[name]) for name in inputs]
    user = [Ref(gi.value.name) for gi in graph_inputs if not gi.is_state]
    targets = {gi.target or gi.value.name for gi in graph_inputs if gi.is_state}
    # the symbols its inputs bind (all it uses, see _size_carriers) and their guards
    bound = bound_by(inputs, values)
    symbols = {name: info for name, info in graph.symbols.items() if name in bound}
    guards = [g for g in graph.guards if {str(s) for s in g.expr.free_symbols} <= bound]
    return Graph(
        inputs=graph_inputs,
        nodes=list(segment),
        in_spec=TreeSpec("tuple", (LEAF,) * len(user)),
        input_leaves=list(user),
        out_spec=TreeSpec("tuple", (LEAF,) * len(outputs)),
        output_leaves=[Ref(name) for name in outputs],
        symbols=symbols,
        guards=guards,
        constants={k: v for k, v in graph.constants.items() if k in targets},
        subgraphs=dict(graph.subgraphs),
        name=f"{graph.name}_piece{index}",
        meta={**graph.meta, "split": f"piece {index + 1} of {count}"},
    )


def _reads(segment: list[Node]) -> list[str]:
    """The value names `segment`'s nodes read, in order of first read, without repeats."""
    seen: dict[str, None] = {}
    for node in segment:
        for arg in (*node.args, *node.kwargs.values()):
            for ref in refs(arg):
                seen.setdefault(ref.name)
    return list(seen)


def refs(arg: Any) -> Iterator[Ref]:
    if isinstance(arg, Ref):
        yield arg
    elif isinstance(arg, (list, tuple)):
        for item in arg:
            yield from refs(item)
    elif isinstance(arg, dict):
        for item in arg.values():
            yield from refs(item)
    elif isinstance(arg, SubgraphRef):
        return


def example_inputs(
    graph: Graph, pieces: Sequence[Piece], examples: Sequence[Any]
) -> list[list[Any]]:
    """Example inputs for each piece: the call's own values where a piece reads an input of
    the Graph, zero tensors of the recorded spec where it reads another piece's output."""
    leaves, _ = tree_flatten(tuple(examples))
    known: dict[str, Any] = {
        leaf.name: value for leaf, value in zip(graph.input_leaves, leaves) if isinstance(leaf, Ref)
    }
    values = graph.values()
    hints = {name: info.hint for name, info in graph.symbols.items() if info.hint is not None}
    found: list[list[Any]] = []
    for piece in pieces:
        row = []
        for name in piece.inputs:
            if name not in known:
                known[name] = _zeros(values[name], hints)
            row.append(known[name])
        found.append(row)
    return found


def _zeros(value: Value, hints: dict[str, int]) -> Any:
    """Zeros of `value`'s spec, symbolic sizes at their hints."""
    spec = value.spec
    if not isinstance(spec, TensorSpec):
        raise ValueError(f"{value.name} is not a tensor to make an example of")
    shape = [int(evaluate_expr(size, hints)) for size in spec.shape]
    strides = [int(evaluate_expr(size, hints)) for size in spec.strides]
    tensor = torch.empty_strided(shape, strides, dtype=spec.dtype, device=spec.device).zero_()
    return tensor.requires_grad_(spec.requires_grad and tensor.is_floating_point())


class SplitGraph:
    """Runs the compiled pieces of a split Graph as the whole Graph would run: takes the
    call's inputs as `ember.prims.run(graph, ...)` does and returns the Graph's output."""

    def __init__(
        self, graph: Graph, pieces: Sequence[Piece], compiled: Sequence[Callable[..., Any]]
    ) -> None:
        self.graph = graph
        self.pieces = list(pieces)
        self.compiled = list(compiled)
        self._input_names = [
            leaf.name if isinstance(leaf, Ref) else None for leaf in graph.input_leaves
        ]
        # state inputs the Graph returns as they are (its pieces bind their own)
        self._state = {
            gi.value.name: graph.constants[gi.target or gi.value.name]
            for gi in graph.state_inputs()
            if (gi.target or gi.value.name) in graph.constants
        }
        # what to let go after each piece: values no later piece reads and the Graph does
        # not return (the whole Graph would have freed them there too)
        returned = {leaf.name for leaf in graph.output_leaves if isinstance(leaf, Ref)}
        last: dict[str, int] = {}
        for index, piece in enumerate(self.pieces):
            for name in (*piece.inputs, *piece.outputs):
                last[name] = index
        self._release: list[list[str]] = [[] for _ in self.pieces]
        for name, index in last.items():
            if name not in returned:
                self._release[index].append(name)

    def __call__(self, *inputs: Any) -> Any:
        leaves, _ = tree_flatten(inputs)
        env: dict[str, Any] = {
            name: value for name, value in zip(self._input_names, leaves) if name is not None
        }
        env.update(self._state)
        for piece, compiled, release in zip(self.pieces, self.compiled, self._release):
            results = compiled(*[env[name] for name in piece.inputs])
            env.update(zip(piece.outputs, results))
            del results
            for name in release:
                env.pop(name, None)
        out = [
            env[leaf.name] if isinstance(leaf, Ref) else leaf for leaf in self.graph.output_leaves
        ]
        return tree_unflatten(out, self.graph.out_spec)
