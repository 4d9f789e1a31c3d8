"""`aot(graph, example_inputs, fw_compiler, bw_compiler)`: ahead-of-time autograd for a backend,
and `aot_eager`, the backend that runs both halves with the ember-prims interpreter.

The pipeline, one named pass each: functionalize -> joint -> decompose -> partition ->
compile forward / compile backward. The joint trace runs when a call needs gradients (for
the pattern of inputs that require grad); a call without them runs the pure Graph.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, overload

import torch

from ember.autodiff import partition_cache
from ember.autodiff.errors import AutodiffError
from ember.autodiff.functionalize import FunctionalGraph, functionalize
from ember.autodiff.joint import trace_joint
from ember.autodiff.partition import PARTITIONERS, partition
from ember.autodiff.partition_cache import CachedPartition, PartitionStore
from ember.autodiff.runtime import CompiledFunction, TrainingStep
from ember.autodiff.tangent_reach import tangents_reaching
from ember.prims import (
    Graph,
    GraphInput,
    InputKind,
    Interpreter,
    Ref,
    TensorSpec,
    autocast_disabled,
    cross_boundary,
    tree_flatten,
)
from ember.prims.config import PrimsConfig, load
from ember.prims.logs import topic_logger
from ember.prims.symbolic import evaluate_expr

# A compiler of one half: (graph, example_inputs) -> a callable taking the graph's inputs.
Compiler = Callable[[Graph, Sequence[Any]], Callable[..., Any]]

logger = logging.getLogger("ember.autodiff")
graphs_log = topic_logger("graphs")


def aot(
    graph: Graph,
    example_inputs: Sequence[Any],
    fw_compiler: Compiler,
    bw_compiler: Compiler,
    decompositions: Mapping[str, Callable[..., Any]] | None = None,
    partitioner: str = "min_cut",
    store: PartitionStore | None = None,
) -> Callable[..., Any]:
    """Compile `graph` for training: a callable with the calling convention of a backend's
    result (`compiled(*inputs)`, inputs as `ember.prims.run(graph, ...)` takes them).

    `fw_compiler` gets the forward Graph `(primals...) -> (outputs..., saved...)` (or, for
    calls that need no gradient, the pure Graph `(primals...) -> (outputs...)`) with real
    example primals; `bw_compiler` gets the backward Graph `(saved..., tangents...) ->
    (gradient per primal...)` with zero-filled example tensors of its input specs. Primals
    are the Graph's non-constant inputs in order (user inputs, then parameters and buffers).
    `decompositions` (an ember-prims table) is applied to the joint Graph before partitioning;
    `partitioner` is "min_cut" (recompute cheap ops) or "naive" (save what backward reads).
    `store` keeps partitions across processes (partition_cache.py): a warm start skips the
    joint trace and the partition, and functionalization where the entry holds the Signature.
    """
    if partitioner not in PARTITIONERS:
        raise AutodiffError(
            f"unknown partitioner {partitioner!r}; choose one of {', '.join(PARTITIONERS)}"
        )
    with autocast_disabled():  # the Graph holds autocast's casts: tracing must not add more
        return _aot(
            graph, example_inputs, fw_compiler, bw_compiler, decompositions, partitioner, store
        )


def _aot(
    graph: Graph,
    example_inputs: Sequence[Any],
    fw_compiler: Compiler,
    bw_compiler: Compiler,
    decompositions: Mapping[str, Callable[..., Any]] | None,
    partitioner: str,
    store: PartitionStore | None = None,
) -> Callable[..., Any]:
    config = load(PrimsConfig)
    live_state = dict(graph.constants)  # parameters stay the live tensors, not copies
    graph = cross_boundary(graph, "backend -> autodiff", config)
    flat = tuple(gi for gi in graph.inputs if gi.kind is not InputKind.CONSTANT)
    examples = _example_primals(flat, graph.input_leaves, example_inputs, live_state)
    # Parameters and buffers outlive the step: the partition may save them at no cost.
    resident = [
        i
        for i, (graph_input, example) in enumerate(zip(flat, examples))
        if graph_input.kind in (InputKind.PARAMETER, InputKind.BUFFER)
        or isinstance(example, torch.nn.Parameter)
    ]
    functional: list[FunctionalGraph] = []  # functionalized on first need

    def functionalized() -> FunctionalGraph:
        if not functional:
            functional.append(functionalize(graph))
            _check(functional[0].graph, config)
        return functional[0]

    def lookup(requires_grad: tuple[bool, ...]) -> tuple[str | None, CachedPartition | None]:
        """The partition cache's key for this pattern and its entry (None on a miss)."""
        if store is None:
            return None, None
        key = partition_cache.partition_key(
            graph, requires_grad, partitioner, resident, decompositions
        )
        cached = store.get(key) if key is not None else None
        return key, partition_cache.decode(cached, graph) if cached is not None else None

    def inference() -> Callable[..., Any]:
        with autocast_disabled():
            return _inference()

    def _inference() -> Callable[..., Any]:
        pure = functionalized().graph
        if decompositions:
            from ember.prims.decompositions import decompose

            pure = decompose(pure, decompositions)
        _log("functionalize", pure)
        return fw_compiler(cross_boundary(pure, "autodiff -> forward compiler", config), examples)

    def training(
        requires_grad: tuple[bool, ...], found: tuple[str | None, CachedPartition | None]
    ) -> TrainingStep:
        with autocast_disabled():  # a later call may ask for it under the caller's autocast
            return _training(requires_grad, *found)

    def _training(
        requires_grad: tuple[bool, ...], key: str | None, known: CachedPartition | None
    ) -> TrainingStep:
        if known is not None:  # a warm start: no joint trace, no partition
            parts, differentiable = known.parts, known.differentiable
            signature = known.signature or functionalized().signature
        else:
            signature = functionalized().signature
            joint = trace_joint(graph, requires_grad, decompositions)
            _check(joint.graph, config)
            _log("joint", joint.graph)
            parts = partition(joint, partitioner, resident)
            differentiable = joint.differentiable
            if store is not None and key is not None:
                store.put(key, partition_cache.encode(parts, differentiable, signature))
        _log("partition (forward)", parts.forward)
        _log("partition (backward)", parts.backward)
        logger.debug(
            "%s: the forward saves %d values (%d bytes) for the backward",
            graph.name,
            len(parts.saved),
            parts.saved_bytes,
        )
        forward = fw_compiler(
            cross_boundary(parts.forward, "autodiff -> forward compiler", config), examples
        )
        backward = bw_compiler(
            cross_boundary(parts.backward, "autodiff -> backward compiler", config),
            _Zeros(parts.backward),
        )
        mutated = {signature.inputs[i].value.name for i, _ in signature.mutations}
        clone = tuple(i for i, name in enumerate(parts.saved) if name in mutated)
        return TrainingStep(
            forward,
            backward,
            parts.num_forward_outputs,
            differentiable,
            clone,
            tangents_reaching(parts.backward),
        )

    flags = tuple(isinstance(t, torch.Tensor) and t.requires_grad for t in examples)
    grad = torch.is_grad_enabled() and any(flags)
    found = lookup(flags) if grad else (None, None)
    # a hit carries the Signature functionalization would give (the same Graph and source)
    signature = found[1].signature if found[1] is not None else None
    compiled = CompiledFunction(
        signature or functionalized().signature,
        live_state,
        inference,
        lambda requires_grad: training(requires_grad, lookup(requires_grad)),
    )
    if grad:
        compiled._training[flags] = training(flags, found)
    else:
        compiled._inference = inference()
    return compiled


def aot_eager(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """The `aot_eager` backend: `aot` with both halves run by the ember-prims interpreter."""
    return aot(graph, example_inputs, fw_compiler=_interpret, bw_compiler=_interpret)


def _interpret(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    del example_inputs  # the interpreter needs no specialization
    return Interpreter(graph)


def _example_primals(
    flat: Sequence[GraphInput],
    input_leaves: Sequence[Any],
    example_inputs: Sequence[Any],
    state: Mapping[str, torch.Tensor],
) -> list[Any]:
    """The primals' example values: `flat` (the Graph's non-constant inputs) from the user's
    inputs, placed by the Graph's input leaves, and from the parameters and buffers."""
    leaves, _ = tree_flatten(tuple(example_inputs))
    by_name = {
        leaf.name: value for leaf, value in zip(input_leaves, leaves) if isinstance(leaf, Ref)
    }
    examples: list[Any] = []
    for graph_input in flat:
        if graph_input.kind is InputKind.USER:
            examples.append(by_name[graph_input.value.name])
        else:
            examples.append(state[graph_input.target or graph_input.value.name])
    return examples


class _Zeros(Sequence[torch.Tensor]):
    """The backward compiler's example inputs, `_zeros_for(graph)`, allocated on first
    access: a compiler that only reads the Graph (ember-inductor, warm or cold) allocates
    nothing (GPT-2 small's saved activations are gigabytes)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.length = len(graph.user_inputs())
        self.tensors: list[torch.Tensor] | None = None

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> torch.Tensor: ...

    @overload
    def __getitem__(self, index: slice) -> list[torch.Tensor]: ...

    def __getitem__(self, index: int | slice) -> torch.Tensor | list[torch.Tensor]:
        if self.tensors is None:
            self.tensors = _zeros_for(self.graph)
        return self.tensors[index]


def _zeros_for(graph: Graph) -> list[torch.Tensor]:
    """Zero-filled tensors of the specs of `graph`'s user inputs (backward example inputs),
    symbolic sizes at their hints."""
    hints = {name: info.hint for name, info in graph.symbols.items() if info.hint is not None}
    tensors: list[torch.Tensor] = []
    for graph_input in graph.user_inputs():
        spec = graph_input.value.spec
        assert isinstance(spec, TensorSpec)
        shape = [int(evaluate_expr(s, hints)) for s in spec.shape]
        strides = [int(evaluate_expr(s, hints)) for s in spec.strides]
        tensor = torch.empty_strided(shape, strides, dtype=spec.dtype, device=spec.device)
        tensors.append(tensor.zero_())
    return tensors


def _check(graph: Graph, config: PrimsConfig) -> None:
    if config.verify_passes:
        graph.verify()


def _log(stage: str, graph: Graph) -> None:
    if graphs_log.isEnabledFor(logging.INFO):
        graphs_log.info("%s:\n%s", stage, graph)
