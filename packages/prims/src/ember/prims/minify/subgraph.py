"""Cutting a Graph down to a subset of its nodes, for the minifier.

`Cutter(graph, inputs)` runs the Graph once with the interpreter and keeps every value it
computes. `cut(keep)` then builds a self-contained Graph of the kept nodes: a value a kept node
reads but no kept node computes (an original input, or the output of a node cut away) becomes
a user input fed with the value the full run computed (a scalar becomes a literal); the
outputs are the original outputs among the kept values and every kept value no kept node reads.
Parameters and constants become plain user inputs, so a repro carries them explicitly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from ember.prims.graph import Arg, Graph, GraphInput, InputKind, Node, Ref, SubgraphRef, Value
from ember.prims.interpreter import Interpreter
from ember.prims.minify.failure import clone_inputs
from ember.prims.pytree import TreeSpec
from ember.prims.specs import TensorSpec


def all_values(graph: Graph, inputs: Sequence[Any]) -> dict[str, Any]:
    """Every input and node output of `graph` run on `inputs` by the interpreter, by name.
    An in-place op's target shows its value after the whole run (the minifier checks each
    candidate, so such a value can only make a cut fail to reproduce, never a false repro)."""
    names = [value.name for value in graph.values().values()]
    probe = dataclasses.replace(
        graph,
        out_spec=TreeSpec("tuple", tuple(TreeSpec("leaf") for _ in names)),
        output_leaves=[Ref(name) for name in names],
    )
    with torch.no_grad():
        results = Interpreter(probe)(*clone_inputs(inputs))
    return {name: _detach(value) for name, value in zip(names, results)}


def _detach(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def refs_in(arg: Arg) -> Iterable[str]:
    """Names referenced by a node argument (nested lists and tuples included)."""
    if isinstance(arg, Ref):
        yield arg.name
    elif isinstance(arg, (list, tuple)):
        for item in arg:
            yield from refs_in(item)


def _subgraphs_in(arg: Arg) -> Iterable[str]:
    if isinstance(arg, SubgraphRef):
        yield arg.name
    elif isinstance(arg, (list, tuple)):
        for item in arg:
            yield from _subgraphs_in(item)


def _replace(arg: Arg, literals: dict[str, Any]) -> Arg:
    if isinstance(arg, Ref) and arg.name in literals:
        return literals[arg.name]
    if isinstance(arg, list):
        return [_replace(item, literals) for item in arg]
    if isinstance(arg, tuple):
        return tuple(_replace(item, literals) for item in arg)
    return arg


class Cutter:
    """Builds the Graph of any subset of `graph`'s nodes, with inputs to run it on."""

    def __init__(self, graph: Graph, inputs: Sequence[Any]) -> None:
        self.graph = graph
        self.values = all_values(graph, inputs)
        self.specs = graph.values()
        outputs = [leaf.name for leaf in graph.output_leaves if isinstance(leaf, Ref)]
        self.original_outputs = set(outputs)

    def cut(self, keep: Iterable[int]) -> tuple[Graph, list[Any]]:
        """The Graph of the nodes at positions `keep` and the inputs to call it with."""
        nodes = [self.graph.nodes[i] for i in sorted(set(keep))]
        produced = {value.name for node in nodes for value in node.output_values()}
        read: list[str] = []
        for node in nodes:
            for arg in [*node.args, *node.kwargs.values()]:
                read.extend(name for name in refs_in(arg) if name not in produced)
        literals: dict[str, Any] = {}
        inputs: list[GraphInput] = []
        example: list[Any] = []
        seen: set[str] = set()
        for name in read:
            if name in seen:
                continue
            seen.add(name)
            value = self.values[name]
            if isinstance(value, torch.Tensor):
                spec = self.specs[name].spec
                if not isinstance(spec, TensorSpec) or spec.is_static():
                    spec = TensorSpec.of(value)
                inputs.append(GraphInput(Value(name, spec), InputKind.USER))
                example.append(value)
            else:  # a scalar a removed node computed: the literal it was
                literals[name] = value
        new_nodes = (
            [
                dataclasses.replace(
                    node,
                    args=[_replace(a, literals) for a in node.args],
                    kwargs={k: _replace(a, literals) for k, a in node.kwargs.items()},
                )
                for node in nodes
            ]
            if literals
            else [dataclasses.replace(node) for node in nodes]
        )
        outputs = self._outputs(new_nodes)
        used_subgraphs = {
            name
            for node in new_nodes
            for arg in [*node.args, *node.kwargs.values()]
            for name in _subgraphs_in(arg)
        }
        symbols = {
            name
            for graph_input in inputs
            if isinstance(graph_input.value.spec, TensorSpec)
            for name in graph_input.value.spec.free_symbols()
        }
        graph = Graph(
            inputs=inputs,
            nodes=new_nodes,
            in_spec=TreeSpec("tuple", tuple(TreeSpec("leaf") for _ in inputs)),
            input_leaves=[Ref(gi.value.name) for gi in inputs],
            out_spec=TreeSpec("tuple", tuple(TreeSpec("leaf") for _ in outputs)),
            output_leaves=[Ref(name) for name in outputs],
            symbols={k: v for k, v in self.graph.symbols.items() if k in symbols},
            guards=[
                guard
                for guard in self.graph.guards
                if {str(s) for s in guard.expr.free_symbols} <= symbols
            ],
            subgraphs={k: v for k, v in self.graph.subgraphs.items() if k in used_subgraphs},
            name=f"{self.graph.name}_minified",
            meta={"pass": "minify"},
        )
        return graph, example

    def _outputs(self, nodes: list[Node]) -> list[str]:
        read = {
            name
            for node in nodes
            for a in [*node.args, *node.kwargs.values()]
            for name in refs_in(a)
        }
        outputs: list[str] = []
        for node in nodes:
            for value in node.output_values():
                if value.name in self.original_outputs or value.name not in read:
                    outputs.append(value.name)
        return outputs
