"""`CompiledGraph`: the callable a compile returns. It takes the user inputs as
`ember.prims.run(graph, ...)` does, binds state inputs from the Graph's constants, runs the
wrapper, and rebuilds the output structure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ember.inductor.errors import DeviceMismatchError
from ember.prims import (
    Graph,
    Ref,
    TensorSpec,
    autocast_disabled,
    autocast_enabled,
    tree_flatten,
    tree_unflatten,
)


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
        self._graph = graph
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
        try:
            if autocast_enabled():  # the Graph holds its casts already
                with autocast_disabled():
                    results = self.call(args)
            else:
                results = self.call(args)
        except Exception as error:
            mismatch = self._device_mismatch(args)
            if mismatch is not None:
                raise mismatch from error
            raise
        if self._flat_outputs:
            return tuple(results)
        return tree_unflatten(list(results), self.out_spec)

    def _device_mismatch(self, args: list[Any]) -> DeviceMismatchError | None:
        """After a failure: the first input on another device than the Graph declares
        (checked only then, so a call pays nothing for it)."""
        graph = self._graph
        for graph_input, value in zip(graph.inputs, args):
            spec = graph_input.value.spec
            if not isinstance(value, torch.Tensor) or not isinstance(spec, TensorSpec):
                continue
            if value.device.type == spec.device.type or (
                spec.device.type == "cpu" and value.dim() == 0
            ):
                continue
            name = graph_input.target or graph_input.value.name
            kind = "parameter or buffer" if graph_input.is_state else "input"
            where = _first_use(graph, graph_input.value.name)
            return DeviceMismatchError(
                f"{kind} {name!r} is a {value.device.type} tensor, but this graph was compiled "
                f"for {spec.device.type} tensors{where}. Move it with "
                f"`.to({str(spec.device)!r})` before the call (or the model with "
                f"`model.to({str(spec.device)!r})`), so every tensor is on one device."
            )
        return None


def _first_use(graph: Graph, name: str) -> str:
    for node in graph.nodes:
        if any(isinstance(a, Ref) and a.name == name for a in tree_flatten(list(node.args))[0]):
            if node.source is not None:
                return f"; it is first used at {node.source.short()}: {node.source.code.strip()}"
    return ""
