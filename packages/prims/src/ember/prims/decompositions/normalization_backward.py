"""Backward ops of the normalizations that `normalization.py` does not cover: group norm's
(reductions over each group and pointwise ATen ops) and `batch_norm_backward`, the op
autograd records for `_batch_norm_with_update` (native_batch_norm_backward's arguments plus
a reserve buffer that the CPU ignores).

torch's meta kernels of both take concrete sizes only; the tracer computes their results
from these decompositions when sizes are symbolic (`dynamic=True`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten


@to_prims("aten::batch_norm_backward.default")
def _batch_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    save_mean: torch.Tensor | None,
    save_var: torch.Tensor | None,
    update: bool,
    eps: float,
    output_mask: Sequence[bool],
    reserve: torch.Tensor,
) -> tuple[Any, Any, Any]:
    del reserve  # cuDNN's workspace; empty on the CPU
    result: tuple[Any, Any, Any] = aten.native_batch_norm_backward.default(
        grad, x, weight, running_mean, running_var, save_mean, save_var, update, eps,
        list(output_mask),
    )  # fmt: skip
    return result


@to_prims("aten::native_group_norm_backward.default")
def _native_group_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    n: Any,
    c: Any,
    hw: Any,
    group: int,
    output_mask: Sequence[bool],
) -> tuple[Any, Any, Any]:
    count = (c // group) * hw  # elements per group
    grouped = [n, group, count]
    channels = [n, c, hw]
    stats = aten.unsqueeze.default(mean, 2), aten.unsqueeze.default(rstd, 2)
    x_hat = aten.mul.Tensor(aten.sub.Tensor(aten.reshape.default(x, grouped), stats[0]), stats[1])
    grad_c = aten.reshape.default(grad, channels)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        # d x = rstd / count * (count * g - sum(g) - x_hat * sum(g * x_hat)) per group, where
        # g is the gradient of the normalized value (grad times the channel's weight)
        g = grad_c
        if weight is not None:
            g = aten.mul.Tensor(g, aten.reshape.default(weight, [1, c, 1]))
        g = aten.reshape.default(g, grouped)
        g_sum = aten.sum.dim_IntList(g, [2], True)
        dot = aten.sum.dim_IntList(aten.mul.Tensor(g, x_hat), [2], True)
        inner = aten.sub.Tensor(
            aten.sub.Tensor(aten.mul.Scalar(g, count), g_sum), aten.mul.Tensor(x_hat, dot)
        )
        grad_input = aten.mul.Tensor(inner, aten.div.Scalar(stats[1], count))
        grad_input = aten.reshape.default(grad_input, list(x.shape))
        if grad_input.dtype != x.dtype:
            grad_input = aten._to_copy.default(grad_input, dtype=x.dtype)
    if output_mask[1]:
        x_hat_c = aten.reshape.default(x_hat, channels)
        grad_weight = aten.sum.dim_IntList(aten.mul.Tensor(grad_c, x_hat_c), [0, 2])
    if output_mask[2]:
        grad_bias = aten.sum.dim_IntList(grad_c, [0, 2])
    return grad_input, grad_weight, grad_bias
