"""Meta rules for ATen ops that torch has no meta kernel for.

Some backward ops of losses and pools (`multi_margin_loss_backward`, ...) have CPU and CUDA
kernels only; the tracer computes their results' dtypes and shapes here. Each rule takes the
op's arguments (meta tensors) and returns meta tensors, as a meta kernel would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

MetaRule = Callable[..., Any]


def _gradient_of(position: int) -> MetaRule:
    """A backward op whose result is the gradient of argument `position` (same shape)."""

    def rule(*args: Any, **kwargs: Any) -> torch.Tensor:
        like = args[position]
        return torch.empty(like.shape, dtype=like.dtype, device="meta")

    return rule


MISSING_META: dict[str, MetaRule] = {
    # (grad_output, self, target, p, margin, weight, reduction) -> grad_input
    "aten::multi_margin_loss_backward.default": _gradient_of(1),
    # (grad_output, self, target, reduction, is_target) -> grad_input
    "aten::multilabel_margin_loss_backward.default": _gradient_of(1),
    # (grad_output, self, kernel_size, output_size, indices) -> grad_input
    "aten::fractional_max_pool3d_backward.default": _gradient_of(1),
    "aten::fractional_max_pool2d_backward.default": _gradient_of(1),
}
