"""`CompiledGraph`: the callable a compile returns. It takes the user inputs as
`ember.prims.run(graph, ...)` does, binds state inputs from the Graph's constants, runs the
wrapper, and rebuilds the output structure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ember.prims import Graph, Ref, tree_flatten, tree_unflatten


class CompiledGraph:
    """A Graph compiled to a wrapper and kernels; `source` is the wrapper's text."""

    def __init__(self, graph: Graph, call: Callable[[list[Any]], tuple[Any, ...]], source: str,
                 module: str, kernel_count: int) -> None:  # fmt: skip
        self.call = call
        self.source = source
        self.module = module
        self.kernel_count = kernel_count
        self.in_spec = graph.in_spec
        self.out_spec = graph.out_spec
        positions = {graph_input.value.name: i for i, graph_input in enumerate(graph.inputs)}
        self._user_positions = [
            positions[leaf.name] if isinstance(leaf, Ref) else None for leaf in graph.input_leaves
        ]
        self._state: list[tuple[int, torch.Tensor]] = []
        for i, graph_input in enumerate(graph.inputs):
            if graph_input.is_state:
                target = graph_input.target or graph_input.value.name
                self._state.append((i, graph.constants[target]))
        self._count = len(graph.inputs)
        # the common case, a flat tuple of tensors: no pytree walk per call
        self._flat_inputs = self.in_spec.kind == "tuple" and all(
            child.kind == "leaf" for child in self.in_spec.children
        )
        self._flat_outputs = self.out_spec.kind == "tuple" and all(
            child.kind == "leaf" for child in self.out_spec.children
        )

    def __call__(self, *inputs: Any) -> Any:
        leaves = inputs if self._flat_inputs else tree_flatten(inputs)[0]
        args: list[Any] = [None] * self._count
        for position, leaf in zip(self._user_positions, leaves):
            if position is not None:
                args[position] = leaf
        for position, tensor in self._state:
            args[position] = tensor
        results = self.call(args)
        if self._flat_outputs:
            return tuple(results)
        return tree_unflatten(list(results), self.out_spec)
