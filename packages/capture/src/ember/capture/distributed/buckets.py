"""DDP's gradient buckets, and where they cut a captured Graph.

DistributedDataParallel all-reduces gradients bucket by bucket: its parameters, in the
order their gradients become ready (about reverse registration order), are grouped by
`torch.distributed`'s own assignment under the size limits DDP derives from `bucket_cap_mb`
(a small first bucket, for the last layers, by default), and the reducer
starts a bucket's all-reduce as soon as all its gradients are ready. One compiled graph
would make every gradient ready at once, at the end of its backward; cutting the Graph
where the next bucket's parameters are first read gives each bucket a piece of its own,
whose backward ends (and whose all-reduce starts) while earlier pieces' backward runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from ember.capture import logs
from ember.capture.backends.registry import Backend
from ember.capture.distributed.parameter_nodes import parameter_values, sink_parameter_nodes
from ember.capture.distributed.sizes import cuts_with_bound_sizes
from ember.capture.distributed.split import (
    SplitGraph,
    example_inputs,
    refs,
    split_graph,
    without_cross_mutation,
)
from ember.prims import Graph, Node, Ref
from ember.prims.pytree import tree_flatten


def ddp_parameters(ddp: nn.Module) -> list[nn.Parameter]:
    """The parameters DDP's reducer manages, in registration order: each once, those
    requiring grad and not in `parameters_to_ignore`."""
    ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    inner: nn.Module = ddp.module  # type: ignore[assignment]
    found: list[nn.Parameter] = []
    seen: set[int] = set()
    for module_name, module in inner.named_modules():
        for name, parameter in module.named_parameters(recurse=False):
            qualified = f"{module_name}.{name}" if module_name else name
            if qualified in ignored or not parameter.requires_grad or id(parameter) in seen:
                continue
            seen.add(id(parameter))
            found.append(parameter)
    return found


def bucket_size_limits(ddp: nn.Module) -> list[int]:
    """The byte limits of DDP's buckets in training, first bucket first: `bucket_cap_mb_list`
    if given, else a first bucket of `dist._DEFAULT_FIRST_BUCKET_BYTES` when `bucket_cap_mb`
    is left at its default, then `bucket_cap_mb` each. (DDP starts with one bucket and, after
    the first backward, rebuilds them under these limits in the order gradients became ready:
    the buckets every later step uses.)"""
    import torch.distributed as dist

    config = getattr(ddp, "_bucket_config", None)
    if config is not None:
        if config.per_bucket_bytes_caps:
            return [int(limit) for limit in config.per_bucket_bytes_caps]
        first, cap = int(config.first_bucket_bytes_cap), int(config.bucket_bytes_cap)
    else:  # older torch: DDP keeps the cap on itself and the first bucket is the default
        cap = int(getattr(ddp, "bucket_bytes_cap", 25 * 1024 * 1024))
        first = min(dist._DEFAULT_FIRST_BUCKET_BYTES, cap)
    return [first, cap] if first < cap else [cap]


def bucket_of(ddp: nn.Module) -> dict[int, int]:
    """id(parameter) -> the index of its DDP bucket, counted in forward order (0 holds the
    first registered parameters, whose gradients are ready last).

    DDP rebuilds its buckets after the first backward over its parameters in the order
    their gradients became ready, roughly reverse registration order, so the first limit
    (DDP's small first bucket) goes to the last layers and the leftover bucket to the first
    ones. This assigns reverse registration order with DDP's own function and limits."""
    import torch.distributed as dist

    parameters = ddp_parameters(ddp)[::-1]
    if not parameters:
        return {}
    assigned, _ = dist._compute_bucket_assignment_by_size(
        list[torch.Tensor](parameters), bucket_size_limits(ddp), [False] * len(parameters)
    )
    last = len(assigned) - 1
    return {
        id(parameters[index]): last - bucket
        for bucket, indices in enumerate(assigned)
        for index in indices
    }


def parameter_buckets(
    graph: Graph, inputs: Sequence[Any], buckets: dict[int, int]
) -> dict[str, int]:
    """Graph input name -> DDP bucket index, for the inputs that are DDP's parameters."""
    leaves, _ = tree_flatten(tuple(inputs))
    return {
        leaf.name: buckets[id(value)]
        for leaf, value in zip(graph.input_leaves, leaves)
        if isinstance(leaf, Ref) and isinstance(value, torch.Tensor) and id(value) in buckets
    }


def bucket_starts(graph: Graph, inputs: Sequence[Any], buckets: dict[int, int]) -> list[int]:
    """Node indices where a piece starts: before the first node that reads a parameter of a
    later bucket than the piece so far (directly, or through nodes computed from parameters
    alone, which go with it). A parameter read again later (tied weights) stays in the
    piece that reads it; nodes reading no parameter stay with the piece before them. Run
    on a Graph whose parameter-only nodes sit before their readers (sink_parameter_nodes)."""
    bucket_by_name = parameter_buckets(graph, inputs, buckets)
    derived = parameter_values(graph, set(bucket_by_name))
    starts: list[int] = []
    current: int | None = None
    for index, node in enumerate(graph.nodes):
        if any(value.name in derived for value in node.output_values()):
            continue  # goes with its reader
        read: list[int] = []
        for name in _names(node.args, node.kwargs):
            if name in bucket_by_name:
                read.append(bucket_by_name[name])
            read.extend(bucket_by_name[p] for p in derived.get(name, ()))
        if not read:
            continue
        latest = max(read)
        if current is None:
            current = latest
        elif latest > current:
            start = index
            previous = starts[-1] if starts else 0
            while start - 1 > previous and _is_derived(graph.nodes[start - 1], derived):
                start -= 1  # the reader's parameter-only nodes come with it
            starts.append(start)
            current = latest
    return starts


def _is_derived(node: Node, derived: dict[str, set[str]]) -> bool:
    return any(value.name in derived for value in node.output_values())


def _names(args: list[Any], kwargs: dict[str, Any]) -> list[str]:
    return [ref.name for arg in (*args, *kwargs.values()) for ref in refs(arg)]


def bucketed_backend(ddp: nn.Module, backend: Backend) -> Backend:
    """`backend` behind a splitter: each Graph is cut at DDP's bucket boundaries and every
    piece is compiled on its own (one Graph when the model fits one bucket). With symbolic
    sizes a piece also takes a Graph input that carries each size it uses."""

    def compile_bucketed(graph: Graph, inputs: Sequence[Any]) -> Callable[..., Any]:
        buckets = bucket_of(ddp)
        sunk = sink_parameter_nodes(graph, set(parameter_buckets(graph, inputs, buckets)))
        starts = without_cross_mutation(sunk, bucket_starts(sunk, inputs, buckets))
        starts = cuts_with_bound_sizes(sunk, starts)
        if not starts:
            return backend(graph, inputs)
        try:
            pieces = split_graph(sunk, starts)
        except ValueError as error:  # a piece would use a size none of its inputs carries
            logs.graphs.info(
                "%s: compiled as one graph, not split at DDP's %d buckets: %s",
                graph.name,
                len(starts) + 1,
                error,
            )
            return backend(graph, inputs)
        examples = example_inputs(sunk, pieces, inputs)
        compiled = [backend(piece.graph, row) for piece, row in zip(pieces, examples)]
        logs.graphs.info(
            "%s: split at DDP's bucket boundaries into %d graphs", graph.name, len(pieces)
        )
        return SplitGraph(sunk, pieces, compiled)

    compile_bucketed.__name__ = f"ddp_buckets({getattr(backend, '__name__', 'backend')})"
    return compile_bucketed
