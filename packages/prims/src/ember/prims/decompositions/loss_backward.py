"""The backward ops autograd records for the losses of `losses.py`: binary cross entropy,
huber, smooth L1 and soft margin, each pointwise ATen ops following ATen's CPU kernels
(their branch points included), scaled by 1/numel for a mean reduction.

torch's meta kernels of these ops take concrete sizes only; the tracer computes their results
from these decompositions when sizes are symbolic (`dynamic=True`).
"""

from __future__ import annotations

import torch

from ember.prims.decompositions.losses import MEAN
from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten


def _mean_scaled(grad: torch.Tensor, a: torch.Tensor, reduction: int) -> torch.Tensor:
    """The incoming gradient of each element: grad / numel for a mean, grad otherwise."""
    return aten.div.Scalar(grad, a.numel()) if reduction == MEAN else grad


@to_prims("aten::binary_cross_entropy_backward.default")
def _binary_cross_entropy_backward(
    grad: torch.Tensor,
    a: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    reduction: int = MEAN,
) -> torch.Tensor:
    # ATen bounds the denominator a * (1 - a) below by 1e-12, as the forward clamps its logs
    denominator = aten.clamp_min.default(aten.mul.Tensor(a, aten.rsub.Scalar(a, 1)), 1e-12)
    result = aten.div.Tensor(aten.mul.Tensor(grad, aten.sub.Tensor(a, target)), denominator)
    if weight is not None:
        result = aten.mul.Tensor(result, weight)
    return aten.div.Scalar(result, a.numel()) if reduction == MEAN else result


def _clipped(
    difference: torch.Tensor, bound: float, outer: torch.Tensor, inside: torch.Tensor
) -> torch.Tensor:
    """-outer where difference <= -bound, outer where difference >= bound, `inside` between
    (ATen's kernels test the bounds first, so the bounds themselves take the outer values)."""
    upper = aten.where.self(aten.ge.Scalar(difference, bound), outer, inside)
    return aten.where.self(aten.le.Scalar(difference, -bound), aten.neg.default(outer), upper)


@to_prims("aten::huber_loss_backward.default")
def _huber_loss_backward(
    grad: torch.Tensor, a: torch.Tensor, target: torch.Tensor, reduction: int, delta: float
) -> torch.Tensor:
    scaled, difference = _mean_scaled(grad, a, reduction), aten.sub.Tensor(a, target)
    outer = aten.mul.Scalar(scaled, delta)
    return _clipped(difference, delta, outer, aten.mul.Tensor(difference, scaled))


@to_prims("aten::smooth_l1_loss_backward.default")
def _smooth_l1_loss_backward(
    grad: torch.Tensor, a: torch.Tensor, target: torch.Tensor, reduction: int, beta: float
) -> torch.Tensor:
    scaled, difference = _mean_scaled(grad, a, reduction), aten.sub.Tensor(a, target)
    if beta == 0:  # L1: slope -1 up to 0 inclusive (ATen tests difference <= -beta first)
        return _clipped(difference, 0.0, scaled, scaled)
    inside = aten.div.Scalar(aten.mul.Tensor(difference, scaled), beta)
    return _clipped(difference, beta, scaled, inside)


@to_prims("aten::soft_margin_loss_backward.default")
def _soft_margin_loss_backward(
    grad: torch.Tensor, a: torch.Tensor, target: torch.Tensor, reduction: int = MEAN
) -> torch.Tensor:
    # loss = log(1 + exp(-target * a)): slope -target * z / (1 + z), z = exp(-target * a)
    z = aten.exp.default(aten.neg.default(aten.mul.Tensor(target, a)))
    slope = aten.neg.default(aten.div.Tensor(aten.mul.Tensor(target, z), aten.add.Scalar(z, 1)))
    return aten.mul.Tensor(slope, _mean_scaled(grad, a, reduction))
