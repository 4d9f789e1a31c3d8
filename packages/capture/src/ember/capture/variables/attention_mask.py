"""scaled_dot_product_attention's mask laid out as the GPU's fused attention kernels take it.

torch picks the attention kernel from the arguments' metadata; on a GPU every fused kernel
(cuDNN, flash, memory-efficient) refuses a mask whose last dimension does not have stride 1,
and the call falls back to the math path, which runs its matmuls in float32 under bf16/fp16
autocast (the CPU kernels accept any mask stride). transformers (5.17) hands exactly such a
mask to every bidirectional attention under a compiler: `q_idx >= 0` broadcast over the keys,
all True, which eager never builds. Capture gives the call the same mask with a contiguous
last dimension instead (one small copy), so the choice can go to the fused kernel eager runs.
A boolean mask costs nothing more: every kernel turns it into a dense additive bias first.
Better still, a boolean mask the Graph computes from literals alone (no input: transformers'
is an `arange` compared with 0) is evaluated while capturing, and when it is all True the call
gets no mask, as in eager (the fused kernels read no bias then).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import _disable_current_modes

from ember.prims import Graph, InterpreterError, Node, Ref, TracerTensor, resolve_op, run

# torch functions whose `attn_mask` (the fourth positional argument) is laid out for the
# fused kernels before the call.
ATTENTION_FUNCTIONS = (F.scaled_dot_product_attention,)
_MASK_POSITION = 3
_CAUSAL_POSITION = 5
# The most Graph nodes evaluated to decide that a mask computed from literals is all True.
MAX_MASK_NODES = 64


def is_attention(fn: object) -> bool:
    """True for the torch attention functions whose mask capture lays out."""
    return any(fn is known for known in ATTENTION_FUNCTIONS)


def fused_kernel_mask(mask: torch.Tensor) -> torch.Tensor:
    """`mask` with stride 1 along its last dimension, the same values and sizes; the
    dimensions it broadcasts (stride 0) before the last two stay broadcast (no copy made)."""
    if mask.dim() == 0 or mask.stride(-1) == 1 or mask.shape[-1] <= 1:
        return mask
    base = mask
    for dim in range(mask.dim() - 2):
        if mask.stride(dim) == 0 and mask.shape[dim] > 1:
            base = base.narrow(dim, 0, 1)
    return base.contiguous().expand(mask.shape)


def attention_arguments(
    args: list[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments of a scaled_dot_product_attention call with its mask, if it has a
    tensor one, dropped when it is known all True, else laid out by `fused_kernel_mask`."""
    causal = args[_CAUSAL_POSITION] if len(args) > _CAUSAL_POSITION else kwargs.get("is_causal")
    if len(args) > _MASK_POSITION:
        mask = args[_MASK_POSITION]
        if isinstance(mask, torch.Tensor):
            mask = None if not causal and known_all_true(mask) else fused_kernel_mask(mask)
            args = [*args[:_MASK_POSITION], mask, *args[_MASK_POSITION + 1 :]]
        return args, kwargs
    mask = kwargs.get("attn_mask")
    if isinstance(mask, torch.Tensor):
        mask = None if not causal and known_all_true(mask) else fused_kernel_mask(mask)
        kwargs = {**kwargs, "attn_mask": mask}
    return args, kwargs


def known_all_true(mask: torch.Tensor) -> bool:
    """Whether `mask`, a tracing tensor, is a boolean its Graph computes from literals alone
    (no Graph input, no random op, static sizes) and every element is True. The nodes that
    compute it run now, on its device."""
    if not isinstance(mask, TracerTensor) or mask.dtype != torch.bool:
        return False
    graph = getattr(mask.owner, "graph", None)
    if not isinstance(graph, Graph):
        return False
    nodes = _computing(graph, mask.value_name)
    if nodes is None:
        return False
    only = Graph(nodes=nodes, output_leaves=[Ref(mask.value_name)], name="attention_mask")
    try:
        with _disable_current_modes():  # real tensors, outside the capture's recording
            value = run(only)
            return isinstance(value, torch.Tensor) and bool(value.all())
    except (InterpreterError, RuntimeError):
        return False


def _computing(graph: Graph, name: str) -> list[Node] | None:
    """The nodes of `graph` that compute the value `name`, in Graph order, or None when it
    reads an input of the Graph, a random op, or more than `MAX_MASK_NODES` nodes."""
    producers = {value.name: node for node in graph.nodes for value in node.output_values()}
    needed: dict[int, Node] = {}
    pending = [name]
    while pending:
        node = producers.get(pending.pop())
        if node is None:  # a Graph input (user input, parameter, buffer or constant)
            return None
        if id(node) in needed:
            continue
        op = resolve_op(node.target)
        if torch.Tag.nondeterministic_seeded in getattr(op, "tags", ()):
            return None
        needed[id(node)] = node
        if len(needed) > MAX_MASK_NODES:
            return None
        pending.extend(_refs([*node.args, *node.kwargs.values()]))
    return [node for node in graph.nodes if id(node) in needed]


def _refs(args: list[Any]) -> list[str]:
    found: list[str] = []
    for arg in args:
        if isinstance(arg, Ref):
            found.append(arg.name)
        elif isinstance(arg, list | tuple):
            found.extend(_refs(list(arg)))
    return found
