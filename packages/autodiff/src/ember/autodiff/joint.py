"""The joint trace: one Graph computing the forward outputs and the gradients of the inputs.

The functionalizing replay runs the Graph on tracing tensors that require grad, under the real
autograd engine; then `torch.autograd.grad` runs the backward formulas, which the same tracer
records. The joint Graph takes `((primals...), (tangents...))` and returns
`((forward outputs...), (gradients...))`, a gradient per primal (None where there is none).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ember.autodiff.dead_code import eliminate_dead_code
from ember.autodiff.functionalize import Signature, functional_trace
from ember.autodiff.replay import FunctionalReplay, placeholder, tracer_for, writes
from ember.prims import (
    Graph,
    GraphInput,
    InputKind,
    Ref,
    SourceLocation,
    Tracer,
    TracerTensor,
    Value,
    tree_flatten,
    tree_unflatten,
)


@dataclass
class JointGraph:
    """A joint forward/backward Graph and what its inputs and outputs are."""

    graph: Graph
    signature: Signature
    requires_grad: tuple[bool, ...]  # per primal: autograd differentiates it
    differentiable: tuple[bool, ...]  # per forward output: it has a tangent input

    @property
    def num_primals(self) -> int:
        return len(self.requires_grad)

    @property
    def num_forward_outputs(self) -> int:
        return len(self.differentiable)


def trace_joint(
    graph: Graph,
    requires_grad: Sequence[bool],
    decompositions: Mapping[str, Callable[..., Any]] | None = None,
) -> JointGraph:
    """The joint forward/backward Graph of `graph`, differentiating the flat inputs flagged in
    `requires_grad` (one flag per non-constant input); decomposed with `decompositions`."""
    started = time.perf_counter()
    tracer = tracer_for(graph)
    with torch.enable_grad():
        replay, primals, outputs, signature = functional_trace(
            graph, tracer, differentiable=True, requires_grad=requires_grad
        )
        differentiable = tuple(
            isinstance(out, torch.Tensor) and out.requires_grad for out in outputs
        )
        tangents = [
            _tangent(tracer, out, index)
            for index, (out, diff) in enumerate(zip(outputs, differentiable))
            if diff
        ]
        wanted = [p for p in primals if p.requires_grad]
        grads_of: dict[str, Any] = {}
        if tangents and wanted:
            marks: list[tuple[int, SourceLocation | None]] = []
            handles = [
                grad_fn.register_prehook(_marker(marks, tracer, source))
                for grad_fn, source in replay.grad_sources.items()
            ]
            start = len(tracer.graph.nodes)
            try:
                with tracer.active():
                    grads = torch.autograd.grad(
                        [o for o, d in zip(outputs, differentiable) if d],
                        wanted,
                        tangents,
                        allow_unused=True,
                    )
            finally:
                for handle in handles:
                    handle.remove()
            _label_backward(tracer.graph, start, marks)
            grads_of = {p.value_name: g for p, g in zip(wanted, grads)}
        gradients = [grads_of.get(p.value_name) for p in primals]
    leaves = [Ref(p.value_name) for p in primals] + [Ref(t.value_name) for t in tangents]
    spec = tree_flatten((tuple(primals), tuple(tangents)))[1]
    tracer.set_inputs_signature(spec, leaves)
    joint = tracer.finish((tuple(outputs), tuple(gradients)))
    joint.name = f"{graph.name}_joint"
    if any(writes(node) for node in joint.nodes):
        joint = _purified(joint)
    eliminate_dead_code(joint)
    if decompositions:
        joint = eliminate_dead_code(_decomposed(joint, decompositions))
    joint.meta = {"pass": "joint", "time_ms": f"{(time.perf_counter() - started) * 1e3:.1f}"}
    flags = tuple(p.requires_grad for p in primals)
    return JointGraph(joint, signature, flags, differentiable)


def _decomposed(joint: Graph, decompositions: Mapping[str, Callable[..., Any]]) -> Graph:
    """`joint` decomposed. With size symbols, a decomposition that fails or decides something
    about a size the Graph's guards do not (nobody would check it before a call) leaves the
    ATen ops for the compiler to take."""
    from ember.prims.decompositions import DecompositionError, decompose

    if not joint.symbols:
        return decompose(joint, decompositions)
    try:
        decomposed = decompose(joint, decompositions)
    except DecompositionError:
        return joint
    known = {guard.expr for guard in joint.guards}
    return joint if any(g.expr not in known for g in decomposed.guards) else decomposed


def _purified(joint: Graph) -> Graph:
    """`joint` with the writes that backward formulas record made pure (fft_c2r's backward
    doubles a narrowed slice of its result in place): the replay runs it once more."""
    tracer = tracer_for(joint)
    replay = FunctionalReplay(joint, tracer, differentiable=False)
    names: dict[str, str] = {}
    for graph_input in joint.inputs:
        if graph_input.kind is InputKind.CONSTANT:
            assert graph_input.target is not None
            tracer.graph.constants[graph_input.target] = joint.constants[graph_input.target]
        tensor = placeholder(tracer, graph_input)
        tracer.graph.inputs[-1] = GraphInput(  # the spec as it was, requires_grad included
            Value(tensor.value_name, graph_input.value.spec), graph_input.kind, graph_input.target
        )
        names[graph_input.value.name] = tensor.value_name
        replay.bind(graph_input.value.name, tensor, constant=graph_input.kind is InputKind.CONSTANT)
    with tracer.active():
        replay.run()
        outputs = [
            replay.read(leaf) if isinstance(leaf, Ref) else leaf for leaf in joint.output_leaves
        ]
    leaves = [
        Ref(names[leaf.name]) if isinstance(leaf, Ref) else leaf for leaf in joint.input_leaves
    ]
    tracer.set_inputs_signature(joint.in_spec, leaves)
    pure = tracer.finish(tree_unflatten(outputs, joint.out_spec))
    pure.name = joint.name
    return pure


def _tangent(tracer: Tracer, output: Any, index: int) -> TracerTensor:
    """A tangent input for forward output `index`: contiguous, like autograd hands it."""
    meta = torch.empty(output.shape, dtype=output.dtype, device="meta")
    spec = tracer._spec_of(meta, output.device, False)
    return placeholder(tracer, GraphInput(Value(f"tangent_{index}", spec)))


def _marker(
    marks: list[tuple[int, SourceLocation | None]], tracer: Tracer, source: SourceLocation | None
) -> Callable[..., None]:
    def hook(grad_outputs: Any) -> None:
        marks.append((len(tracer.graph.nodes), source))

    return hook


def _label_backward(
    graph: Graph, start: int, marks: list[tuple[int, SourceLocation | None]]
) -> None:
    """Give each backward node the user line of the forward op whose formula recorded it."""
    current: SourceLocation | None = None
    pending = sorted(marks, key=lambda mark: mark[0])
    position = 0
    for index in range(start, len(graph.nodes)):
        while position < len(pending) and pending[position][0] <= index:
            current = pending[position][1]
            position += 1
        graph.nodes[index].source = current
