"""`CompiledGraph`: the callable a compile returns. It takes the user inputs as
`ember.prims.run(graph, ...)` does, binds state inputs from the Graph's constants, runs the
wrapper (or, with `use_cudagraphs`, replays it from ember-runtime's CUDA graph tree), and
rebuilds the output structure."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch

from ember.inductor.errors import DeviceMismatchError
from ember.inductor.passes.attention_rng import dropout_attention_at, unread_inputs
from ember.prims import (
    Graph,
    Ref,
    TensorSpec,
    tree_flatten,
    tree_unflatten,
)
from ember.prims.ops import op_schema
from ember.runtime.cudagraphs import FunctionMode, GraphFunction, cudagraphify


class CompiledGraph:
    """A Graph compiled to a wrapper and kernels; `source` is the wrapper's text."""

    def __init__(self, graph: Graph, call: Callable[[list[Any]], tuple[Any, ...]], source: str,
                 module: str, kernel_count: int) -> None:  # fmt: skip
        self.call: Callable[[list[Any]], Sequence[Any]] = call
        self._call_boxed: Callable[[list[Any]], Sequence[Any]] | None = None  # see use_cudagraphs
        self.source = source
        self.module = module
        self.kernel_count = kernel_count
        # saved values (by position among a training forward's saved outputs) returned in
        # other strides than the Graph declares: the backward compiles against these
        self.saved_strides: dict[int, tuple[int, ...]] = {}
        # the planned peak of its buffers below 128 MB: the block a CUDA graph recording of
        # it that starts a step may reserve first (`memory_planning.planned_block_bytes`)
        self.planned_block_bytes = 0
        # whether its code writes over donated inputs it holds alone (`wider_in_place`)
        self.writes_donated = False
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
        # every leaf is the Graph input of its position (capture passes parameters as
        # inputs): the arguments are the leaves, with no loop over 170 positions a call
        self._in_order = not self._state and self._user_positions == list(range(self._count))
        self._flat_outputs = self.out_spec.kind == "tuple" and all(
            child.kind == "leaf" for child in self.out_spec.children
        )

    def use_cudagraphs(
        self,
        device: torch.device,
        static_leaves: Collection[int] = (),
        mode: FunctionMode = FunctionMode.INFERENCE,
    ) -> GraphFunction | None:
        """Run from now on through the CUDA graph tree of `device` (mode="reduce-overhead").
        Parameters and buffers bound from the Graph, and the user inputs at `static_leaves`
        (indices into the flat inputs, e.g. a training forward's parameters), are read in
        place; the others are copied into the graph's own inputs, and those the Graph never
        reads (a backward's RNG state of attention without dropout: CPU tensors) are not
        taken at all. Returns the tree's record of this graph (its `mode` can be changed
        later), or None if it runs without graphs."""
        static = {position for position, _ in self._state}
        static |= {
            position
            for leaf, position in enumerate(self._user_positions)
            if leaf in static_leaves and position is not None
        }
        graph = self._graph
        saved_inputs = int(graph.meta.get("saved_inputs", "0") or 0)  # a training backward's
        call = cudagraphify(
            self.call,
            name=self._graph.name,
            device=device,
            static_positions=static,
            mutated_positions=mutated_inputs(self._graph),
            unread_positions=unread_inputs(self._graph),
            mode=mode,
            host_tensor_at=(
                host_tensor_at(self._graph) or dropout_attention_at(self._graph)
                if device.type == "cuda"
                else None
            ),
            saved_outputs=int(graph.meta.get("saved_outputs", "0") or 0),
            reserve_bytes=self.planned_block_bytes if mode is not FunctionMode.BACKWARD else 0,
            writes_donated=self.writes_donated,
            saved_positions={
                position
                for leaf, position in enumerate(self._user_positions)
                if leaf < saved_inputs and position is not None
            },
        )
        self.call = call
        # a boxed call's caller dropped its saved values: the tree may reuse their memory
        self._call_boxed = getattr(call, "consuming", call)
        function = getattr(call, "function", None)
        return function if isinstance(function, GraphFunction) else None

    def __call__(self, *inputs: Any) -> Any:
        leaves = inputs if self._flat_inputs else tree_flatten(inputs)[0]
        return self._run(self._arguments(leaves), leaves)

    def call_boxed(self, inputs: list[Any]) -> Any:
        """`self(*inputs)` for flat inputs, taking them in a list it empties: the wrapper holds
        the only references and drops each input after its last use (ember-autodiff's runtime
        hands a training backward its saved values so, as torch.compile's boxed call does:
        ResNet-50's backward peak at batch 4, 197 -> 140 MB counted on the CPU)."""
        if self._in_order and len(inputs) == self._count:
            return self._run(inputs, None, self._call_boxed)
        leaves = tuple(inputs)
        inputs.clear()
        return self._run(self._arguments(leaves), leaves, self._call_boxed)

    def _arguments(self, leaves: Sequence[Any]) -> list[Any]:
        """The wrapper's argument list: the Graph inputs by position."""
        if self._in_order and len(leaves) == self._count:
            return list(leaves)
        args: list[Any] = [None] * self._count
        for position, leaf in zip(self._user_positions, leaves):
            if position is not None:
                args[position] = leaf
        for position, tensor in self._state:
            args[position] = tensor
        return args

    def _run(
        self,
        args: list[Any],
        leaves: Sequence[Any] | None,
        call: Callable[[list[Any]], Sequence[Any]] | None = None,
    ) -> Any:
        """The wrapper (or `call`) on `args` (which it empties); `leaves`, if the caller keeps
        them, name an input on the wrong device after a failure."""
        call = call or self.call
        try:
            if _autocast_on("cuda") or _autocast_on("cpu"):  # the Graph holds its casts already
                results = _without_autocast(call, args)
            else:
                results = call(args)
        except Exception as error:
            mismatch = (
                self._device_mismatch(self._arguments(leaves)) if leaves is not None else None
            )
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
            # a 0-d CPU tensor goes with tensors of any device (torch takes it as a number;
            # memory-efficient attention's philox seed and offset are such tensors on a
            # GPU): a failure is never blamed on one
            if value.device.type == spec.device.type or (
                value.device.type == "cpu" and value.dim() == 0
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


_autocast_on = torch.is_autocast_enabled
_AUTOCAST_DEVICES = ("cuda", "cpu")  # those prims' autocast_disabled() turns off


def _without_autocast(call: Callable[[list[Any]], Sequence[Any]], args: list[Any]) -> Sequence[Any]:
    """`call(args)` with autocast off on every device type: what prims' `autocast_disabled()`
    does, in 1.4 us a call instead of 11 (no context manager objects; autocast's nesting
    count is not touched, so its cast cache is kept, as an inner disabled region keeps it)."""
    states = [(device, _autocast_on(device)) for device in _AUTOCAST_DEVICES]
    for device, _ in states:
        torch.set_autocast_enabled(device, False)
    try:
        return call(args)
    finally:
        for device, enabled in states:
            torch.set_autocast_enabled(device, enabled)


def host_tensor_at(graph: Graph) -> str | None:
    """Where a node of a CUDA Graph copies a CPU tensor to the device (a CUDA graph cannot
    capture that copy), as `op at file:line`; None if no node does. CPU scalars that an op
    reads as a number are fine and not reported."""
    specs = graph.values()
    for node in graph.nodes:
        if "copy" not in node.target and "::to." not in node.target:
            continue
        to_device = any(
            isinstance(v.spec, TensorSpec) and v.spec.device.type == "cuda"
            for v in node.output_values()
        )
        from_host = any(
            isinstance(leaf, Ref) and _on_cpu(specs[leaf.name].spec)
            for leaf in tree_flatten([node.args, node.kwargs])[0]
            if isinstance(leaf, Ref) and leaf.name in specs
        )
        if to_device and from_host:
            where = f" at {node.source.short()}" if node.source is not None else ""
            return f"{node.target}{where}"
    return None


def _on_cpu(spec: Any) -> bool:
    return isinstance(spec, TensorSpec) and spec.device.type == "cpu"


def mutated_inputs(graph: Graph) -> set[int]:
    """Positions of the Graph inputs some node writes to, directly or through a view."""
    roots = {graph_input.value.name: i for i, graph_input in enumerate(graph.inputs)}
    written: set[int] = set()
    for node in graph.nodes:
        try:
            schema = op_schema(node.target)
        except (KeyError, ValueError):
            continue
        if schema is None:
            continue
        arguments = list(zip(schema.arguments, node.args))
        arguments += [(a, node.kwargs[a.name]) for a in schema.arguments if a.name in node.kwargs]
        for argument, value in arguments:
            alias = argument.alias_info
            if alias is None:
                continue
            for leaf in tree_flatten([value])[0]:
                if isinstance(leaf, Ref) and leaf.name in roots:
                    if alias.is_write:
                        written.add(roots[leaf.name])
                    _alias_outputs(schema, node, alias, roots[leaf.name], roots)
    return written


def _alias_outputs(
    schema: torch.FunctionSchema, node: Any, alias: Any, root: int, roots: dict[str, int]
) -> None:
    """Outputs that alias an argument (views, in-place results) stand for the same input."""
    for returned, output in zip(schema.returns, node.outputs):
        info = returned.alias_info
        if info is None or not (info.before_set & alias.before_set):
            continue
        for value in output if isinstance(output, list) else [output]:
            name = getattr(value, "name", None)
            if isinstance(name, str):
                roots[name] = root


def _first_use(graph: Graph, name: str) -> str:
    for node in graph.nodes:
        if any(isinstance(a, Ref) and a.name == name for a in tree_flatten(list(node.args))[0]):
            if node.source is not None:
                return f"; it is first used at {node.source.short()}: {node.source.code.strip()}"
    return ""
