"""The backward ops autograd records for activations whose forward decomposes elsewhere
(`activations.py`, `rearrangement.py`): hardswish, hardsigmoid, logit, hardshrink,
softshrink, log_sigmoid, prelu and glu, each a `where` or a product of pointwise ATen ops.

torch's meta kernels of these ops take concrete sizes only; the tracer computes their results
from these decompositions when sizes are symbolic (`dynamic=True`), and `decompose` expands
them to prims like any other entry.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten


def _zeros(like: torch.Tensor) -> torch.Tensor:
    return aten.zeros_like.default(like)


@to_prims("aten::hardswish_backward.default")
def _hardswish_backward(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    # hardswish(a) = a * clamp(a + 3, 0, 6) / 6: slope a / 3 + 1/2 inside (-3, 3), 1 above it
    inside = aten.mul.Tensor(grad, aten.add.Scalar(aten.div.Scalar(a, 3), 0.5))
    upper = aten.where.self(aten.lt.Scalar(a, 3), inside, grad)
    return aten.where.self(aten.le.Scalar(a, -3), _zeros(grad), upper)


@to_prims("aten::hardsigmoid_backward.default")
def _hardsigmoid_backward(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    inside = aten.logical_and.default(aten.gt.Scalar(a, -3), aten.lt.Scalar(a, 3))
    return aten.where.self(inside, aten.div.Scalar(grad, 6), _zeros(grad))


@to_prims("aten::logit_backward.default")
def _logit_backward(grad: torch.Tensor, a: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    # logit(a) = log(a / (1 - a)); with eps, a is clamped to [eps, 1 - eps] first (slope 0
    # outside), without it the slope outside [0, 1] is NaN
    low, high = (0.0, 1.0) if eps is None else (eps, 1.0 - eps)
    inside = aten.logical_and.default(aten.ge.Scalar(a, low), aten.le.Scalar(a, high))
    slope = aten.div.Tensor(grad, aten.mul.Tensor(a, aten.rsub.Scalar(a, 1)))
    outside = aten.full_like.default(grad, 0.0 if eps is not None else float("nan"))
    return aten.where.self(inside, slope, outside)


def _shrink_backward(grad: torch.Tensor, a: torch.Tensor, lambd: Any = 0.5) -> torch.Tensor:
    inside = aten.logical_and.default(aten.ge.Scalar(a, -lambd), aten.le.Scalar(a, lambd))
    return aten.where.self(inside, _zeros(grad), grad)


to_prims("aten::hardshrink_backward.default", "aten::softshrink_backward.default")(_shrink_backward)


@to_prims("aten::log_sigmoid_backward.default")
def _log_sigmoid_backward(
    grad: torch.Tensor, a: torch.Tensor, buffer: torch.Tensor
) -> torch.Tensor:
    # d/da log(sigmoid(a)) = 1 - sigmoid(a), computed as ATen's CPU kernel does from
    # z = exp(-|a|): z / (1 + z) for a >= 0, 1 - z / (1 + z) for a < 0 (the forward's buffer
    # holds z on the CPU; on CUDA it is empty and z is computed again)
    if buffer.numel() == 0:
        z = aten.exp.default(aten.neg.default(aten.abs.default(a)))
    else:
        z = buffer
    ratio = aten.div.Tensor(z, aten.add.Scalar(z, 1))
    negative = aten.lt.Scalar(a, 0)
    slope = aten.where.self(negative, aten.rsub.Scalar(ratio, 1), ratio)
    return aten.mul.Tensor(grad, slope)


@to_prims("aten::_prelu_kernel_backward.default")
def _prelu_kernel_backward(
    grad: torch.Tensor, a: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    # Both results have the broadcast shape of a and weight: autograd sums the weight's
    # gradient back to the weight's shape, as for any broadcast input
    positive = aten.gt.Scalar(a, 0)
    grad_input = aten.where.self(positive, grad, aten.mul.Tensor(weight, grad))
    grad_weight = aten.where.self(
        positive, aten.zeros_like.default(grad_input), aten.mul.Tensor(a, grad)
    )
    return grad_input, grad_weight


@to_prims("aten::glu_backward.default")
def _glu_backward(grad: torch.Tensor, a: torch.Tensor, dim: int) -> torch.Tensor:
    # glu(a) = first * sigmoid(second), the two halves of a along dim
    dim = dim + a.dim() if dim < 0 else dim
    half = a.shape[dim] // 2
    first = aten.narrow.default(a, dim, 0, half)
    gate = aten.sigmoid.default(aten.narrow.default(a, dim, half, half))
    grad_first = aten.mul.Tensor(gate, grad)
    grad_second = aten.mul.Tensor(
        aten.mul.Tensor(aten.mul.Tensor(aten.rsub.Scalar(gate, 1), gate), first), grad
    )
    return aten.cat.default([grad_first, grad_second], dim)
