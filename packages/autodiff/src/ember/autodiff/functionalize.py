"""Functionalization: a Graph with writes and views becomes a pure Graph plus a `Signature`.

The pure Graph takes every non-constant input of the original as one flat tuple (parameters
and buffers included) and returns the computed outputs followed by the new values of the
inputs it wrote. The `Signature` tells the runtime how to rebuild the original calling
convention: which inputs to copy back, which outputs are views of inputs (rebuilt from the
real input, so they alias it as in eager), and which are literals.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ember.autodiff.dead_code import eliminate_dead_code
from ember.autodiff.errors import AutodiffError
from ember.autodiff.replay import FunctionalReplay, placeholder, tracer_for
from ember.autodiff.view_rules import ViewStep
from ember.prims import (
    Graph,
    GraphInput,
    InputKind,
    Ref,
    Tracer,
    TracerTensor,
    TreeSpec,
    tree_flatten,
)


@dataclass(frozen=True)
class OutputSource:
    """Where one output leaf of the original Graph comes from at run time.

    `computed`: output `index` of the pure Graph; `input`: flat input `index`, through the view
    `steps` (none: the input itself); `output`: the view `steps` of computed output `index`
    (so outputs share memory as in eager); `literal`: the constant `literal`.
    """

    kind: str
    index: int = -1
    steps: tuple[ViewStep, ...] = ()
    literal: Any = None


@dataclass(frozen=True)
class Signature:
    """The original Graph's calling convention in terms of its pure version."""

    inputs: tuple[GraphInput, ...]  # the flat inputs, as the original Graph declares them
    computed: int  # the pure Graph's first `computed` outputs are computed outputs
    mutations: tuple[tuple[int, int], ...]  # (flat input index, pure output index) to copy back
    outputs: tuple[OutputSource, ...]  # one per output leaf of the original Graph
    out_spec: TreeSpec
    in_spec: TreeSpec
    input_leaves: tuple[Any, ...]


@dataclass
class FunctionalGraph:
    """A pure Graph and how it stands for the original."""

    graph: Graph
    signature: Signature


def functionalize(graph: Graph) -> FunctionalGraph:
    """The pure version of `graph` (no writes, no outputs aliasing inputs) and its Signature."""
    started = time.perf_counter()
    tracer = tracer_for(graph)
    _, primals, outputs, signature = functional_trace(graph, tracer, differentiable=False)
    pure = _finish(tracer, graph, primals, outputs)
    pure.meta = {"pass": "functionalize", "time_ms": _ms(started)}
    return FunctionalGraph(pure, signature)


def functional_trace(
    graph: Graph,
    tracer: Tracer,
    *,
    differentiable: bool,
    requires_grad: Sequence[bool] | None = None,
) -> tuple[FunctionalReplay, list[TracerTensor], list[Any], Signature]:
    """Replay `graph` functionalized into `tracer`; return the replay, the flat primal inputs,
    the pure outputs (computed outputs, then new values of written inputs) and the Signature.

    `requires_grad` (one flag per flat input) marks the primals autograd differentiates.
    """
    replay = FunctionalReplay(graph, tracer, differentiable=differentiable)
    flat = [gi for gi in graph.inputs if gi.kind is not InputKind.CONSTANT]
    flags = list(requires_grad) if requires_grad is not None else [False] * len(flat)
    if len(flags) != len(flat):
        raise AutodiffError(
            f"{len(flags)} requires_grad flags for the {len(flat)} non-constant inputs of "
            f"{graph.name}; give one per input (user inputs, then parameters and buffers)"
        )
    primals: list[TracerTensor] = []
    for graph_input, grad in zip(flat, flags):
        user = GraphInput(graph_input.value, InputKind.USER)
        tensor = placeholder(tracer, user, requires_grad=grad and differentiable)
        primals.append(tensor)
        replay.bind(graph_input.value.name, tensor)
    for graph_input in graph.inputs:
        if graph_input.kind is InputKind.CONSTANT:
            assert graph_input.target is not None
            tracer.graph.constants[graph_input.target] = graph.constants[graph_input.target]
            replay.bind(graph_input.value.name, placeholder(tracer, graph_input), constant=True)
    with tracer.active():
        replay.run()
        positions = {gi.value.name: i for i, gi in enumerate(flat)}
        outputs: list[Any] = []
        by_name: dict[str, int] = {}
        # Outputs that are whole values first, so views of them can be rebuilt from them.
        plain: dict[str, int] = {}  # storage root -> computed output holding the whole root
        ordered = sorted(
            range(len(graph.output_leaves)),
            key=lambda i: _is_view(replay, graph.output_leaves[i]),
        )
        found: dict[int, OutputSource] = {}
        for index in ordered:
            found[index] = _output_source(
                replay, graph.output_leaves[index], positions, outputs, by_name, plain
            )
        sources = [found[index] for index in range(len(graph.output_leaves))]
        computed = len(outputs)
        mutations: list[tuple[int, int]] = []
        for name in replay.mutated_inputs():
            mutations.append((positions[name], len(outputs)))
            outputs.append(replay.current[name])
    signature = Signature(
        inputs=tuple(flat),
        computed=computed,
        mutations=tuple(mutations),
        outputs=tuple(sources),
        out_spec=graph.out_spec,
        in_spec=graph.in_spec,
        input_leaves=tuple(graph.input_leaves),
    )
    return replay, primals, outputs, signature


def _output_source(
    replay: FunctionalReplay,
    leaf: Any,
    positions: dict[str, int],
    outputs: list[Any],
    by_name: dict[str, int],
    plain: dict[str, int],
) -> OutputSource:
    if not isinstance(leaf, Ref):
        return OutputSource("literal", literal=leaf)
    if leaf.name in replay.scalars:
        return OutputSource("literal", literal=replay.scalars[leaf.name])
    root = replay.root[leaf.name]
    steps = replay.steps[leaf.name]
    literal = all(step.is_literal() for step in steps)
    if root in positions and literal:
        return OutputSource("input", positions[root], steps)
    if steps and literal and root in plain:
        return OutputSource("output", plain[root], steps)  # a view of another output
    value = replay.read(leaf)
    name = value.value_name
    if name not in by_name:
        by_name[name] = len(outputs)
        outputs.append(value)
    if not steps:
        plain.setdefault(root, by_name[name])
    return OutputSource("computed", by_name[name])


def _is_view(replay: FunctionalReplay, leaf: Any) -> bool:
    return isinstance(leaf, Ref) and bool(replay.steps.get(leaf.name))


def _finish(tracer: Tracer, graph: Graph, primals: list[TracerTensor], outputs: list[Any]) -> Graph:
    tracer.set_inputs_signature(
        tree_flatten(tuple(primals))[1], [Ref(p.value_name) for p in primals]
    )
    pure = tracer.finish(tuple(outputs))
    pure.name = graph.name
    return eliminate_dead_code(pure)


def _ms(started: float) -> str:
    return f"{(time.perf_counter() - started) * 1e3:.1f}"
