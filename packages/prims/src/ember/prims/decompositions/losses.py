"""ATen loss functions written as short formulas of other ATen ops, each expanded to prims by
the following rounds of `decompose`: regression losses, binary and multi-class
classification losses, and the NLL loss that cross entropy reduces to.

`reduction` follows ATen: 0 none, 1 mean, 2 sum.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten
NONE, MEAN, SUM = 0, 1, 2


def reduce_loss(loss: torch.Tensor, reduction: int) -> torch.Tensor:
    """The elementwise loss reduced as ATen's `reduction` says."""
    if reduction == MEAN:
        return aten.mean.default(loss)
    if reduction == SUM:
        return aten.sum.default(loss)
    return loss


@to_prims("aten::mse_loss.default")
def _mse_loss(a: torch.Tensor, target: torch.Tensor, reduction: int = MEAN) -> torch.Tensor:
    difference = aten.sub.Tensor(a, target)
    return reduce_loss(aten.mul.Tensor(difference, difference), reduction)


@to_prims("aten::huber_loss.default")
def _huber_loss(
    a: torch.Tensor, target: torch.Tensor, reduction: int = MEAN, delta: float = 1.0
) -> torch.Tensor:
    distance = aten.abs.default(aten.sub.Tensor(a, target))
    quadratic = aten.mul.Scalar(aten.mul.Tensor(distance, distance), 0.5)
    linear = aten.mul.Scalar(aten.sub.Scalar(distance, 0.5 * delta), delta)
    return reduce_loss(
        aten.where.self(aten.lt.Scalar(distance, delta), quadratic, linear), reduction
    )


@to_prims("aten::smooth_l1_loss.default")
def _smooth_l1_loss(
    a: torch.Tensor, target: torch.Tensor, reduction: int = MEAN, beta: float = 1.0
) -> torch.Tensor:
    distance = aten.abs.default(aten.sub.Tensor(a, target))
    if beta == 0:
        return reduce_loss(distance, reduction)
    quadratic = aten.div.Scalar(aten.mul.Scalar(aten.mul.Tensor(distance, distance), 0.5), beta)
    linear = aten.sub.Scalar(distance, 0.5 * beta)
    return reduce_loss(
        aten.where.self(aten.lt.Scalar(distance, beta), quadratic, linear), reduction
    )


@to_prims("aten::soft_margin_loss.default")
def _soft_margin_loss(a: torch.Tensor, target: torch.Tensor, reduction: int = MEAN) -> torch.Tensor:
    margin = aten.exp.default(aten.neg.default(aten.mul.Tensor(a, target)))
    return reduce_loss(aten.log1p.default(margin), reduction)


@to_prims("aten::binary_cross_entropy.default")
def _binary_cross_entropy(
    a: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    reduction: int = MEAN,
) -> torch.Tensor:
    # torch clamps each log at -100 so that a probability of exactly 0 or 1 stays finite
    log_p = aten.clamp_min.default(aten.log.default(a), -100)
    log_q = aten.clamp_min.default(aten.log1p.default(aten.neg.default(a)), -100)
    positive = aten.mul.Tensor(target, log_p)
    negative = aten.mul.Tensor(aten.rsub.Scalar(target, 1), log_q)
    loss = aten.neg.default(aten.add.Tensor(positive, negative))
    if weight is not None:
        loss = aten.mul.Tensor(loss, weight)
    return reduce_loss(loss, reduction)


@to_prims("aten::binary_cross_entropy_with_logits.default")
def _binary_cross_entropy_with_logits(
    a: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    pos_weight: torch.Tensor | None = None,
    reduction: int = MEAN,
) -> torch.Tensor:
    # -log(sigmoid(a)) = log1p(exp(-|a|)) + max(-a, 0), stable for large |a|
    softplus = aten.add.Tensor(
        aten.log1p.default(aten.exp.default(aten.neg.default(aten.abs.default(a)))),
        aten.clamp_min.default(aten.neg.default(a), 0),
    )
    if pos_weight is not None:
        scale = aten.add.Scalar(aten.mul.Tensor(aten.sub.Scalar(pos_weight, 1), target), 1)
        softplus = aten.mul.Tensor(scale, softplus)
    loss = aten.add.Tensor(aten.mul.Tensor(aten.rsub.Scalar(target, 1), a), softplus)
    if weight is not None:
        loss = aten.mul.Tensor(loss, weight)
    return reduce_loss(loss, reduction)


def _nll(
    a: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    reduction: int,
    ignore_index: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    # classes lie along dim 1 (dim 0 for a single unbatched sample)
    class_dim = 0 if a.dim() == 1 else 1
    keep = aten.ne.Scalar(target, ignore_index)
    safe = aten.where.self(keep, target, aten.zeros_like.default(target))
    picked = aten.squeeze.dim(
        aten.gather.default(a, class_dim, aten.unsqueeze.default(safe, class_dim)), class_dim
    )
    weights = aten._to_copy.default(keep, dtype=a.dtype)
    if weight is not None:
        weights = aten.mul.Tensor(weights, aten.index.Tensor(weight, [safe]))
    loss = aten.neg.default(aten.mul.Tensor(picked, weights))
    total = aten.sum.default(weights)
    if reduction == MEAN:
        return aten.div.Tensor(aten.sum.default(loss), total), total
    if reduction == SUM:
        return aten.sum.default(loss), total
    return loss, total


@to_prims("aten::nll_loss_forward.default", "aten::nll_loss2d_forward.default")
def _nll_loss_forward(
    a: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    reduction: int,
    ignore_index: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _nll(a, target, weight, reduction, ignore_index)


@to_prims("aten::multi_margin_loss.default")
def _multi_margin_loss(
    a: torch.Tensor,
    target: torch.Tensor,
    p: Any = 1,
    margin: Any = 1,
    weight: torch.Tensor | None = None,
    reduction: int = MEAN,
) -> torch.Tensor:
    x = a if a.dim() == 2 else aten.reshape.default(a, [1, a.shape[0] if a.dim() else 1])
    y = aten.reshape.default(target, [-1, 1])
    chosen = aten.gather.default(x, 1, y)
    hinge = aten.clamp_min.default(aten.add.Tensor(aten.rsub.Scalar(chosen, margin), x), 0)
    if p == 2:
        hinge = aten.mul.Tensor(hinge, hinge)
    if weight is not None:
        hinge = aten.mul.Tensor(
            hinge, aten.unsqueeze.default(aten.index.Tensor(weight, [y.view(-1)]), 1)
        )
    classes = x.shape[1]
    own = aten.eq.Tensor(aten.arange.default(classes, dtype=torch.int64, device=a.device), y)
    hinge = aten.where.self(own, aten.zeros_like.default(hinge), hinge)
    loss = aten.div.Scalar(aten.sum.dim_IntList(hinge, [1]), classes)
    if a.dim() != 2:
        loss = aten.reshape.default(loss, list(target.shape))
    return reduce_loss(loss, reduction)


@to_prims("aten::multilabel_margin_loss_forward.default")
def _multilabel_margin_loss_forward(
    a: torch.Tensor, target: torch.Tensor, reduction: int
) -> tuple[torch.Tensor, torch.Tensor]:
    x = a if a.dim() == 2 else aten.reshape.default(a, [1, a.shape[0] if a.dim() else 1])
    t = target if target.dim() == 2 else aten.reshape.default(target, list(x.shape))
    classes = x.shape[1]
    # the labels of a row are its entries before the first -1
    valid = aten.cumprod.default(aten._to_copy.default(aten.ne.Scalar(t, -1), dtype=torch.int64), 1)
    valid = aten.eq.Scalar(valid, 1)
    labels = aten.where.self(valid, t, aten.zeros_like.default(t))
    classes_range = aten.arange.default(classes, dtype=torch.int64, device=a.device)
    # hits[n, j, c]: label j of row n is class c
    hits = aten.logical_and.default(
        aten.eq.Tensor(aten.unsqueeze.default(labels, 2), classes_range),
        aten.unsqueeze.default(valid, 2),
    )
    is_target = aten.any.dim(hits, 1)
    label_values = aten.gather.default(x, 1, labels)
    hinge = aten.clamp_min.default(
        aten.add.Tensor(
            aten.rsub.Scalar(aten.unsqueeze.default(label_values, 2), 1),
            aten.unsqueeze.default(x, 1),
        ),
        0,
    )
    counted = aten.logical_and.default(
        aten.unsqueeze.default(valid, 2),
        aten.logical_not.default(aten.unsqueeze.default(is_target, 1)),
    )
    hinge = aten.where.self(counted, hinge, aten.zeros_like.default(hinge))
    loss = aten.div.Scalar(aten.sum.dim_IntList(hinge, [1, 2]), classes)
    is_target = aten._to_copy.default(is_target, dtype=a.dtype)
    if a.dim() != 2:
        loss = aten.reshape.default(loss, [])
        is_target = aten.reshape.default(is_target, list(target.shape))
    return reduce_loss(loss, reduction), is_target


@to_prims("aten::nll_loss_backward.default", "aten::nll_loss2d_backward.default")
def _nll_loss_backward(
    grad: torch.Tensor,
    a: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    reduction: int,
    ignore_index: int,
    total_weight: torch.Tensor,
) -> torch.Tensor:
    class_dim = 0 if a.dim() == 1 else 1
    keep = aten.ne.Scalar(target, ignore_index)
    safe = aten.where.self(keep, target, aten.zeros_like.default(target))
    weights = aten._to_copy.default(keep, dtype=a.dtype)
    if weight is not None:
        weights = aten.mul.Tensor(weights, aten.index.Tensor(weight, [safe]))
    scale = aten.div.Tensor(grad, total_weight) if reduction == MEAN else grad
    # d loss / d a[.., target, ..] = -weight * scale; zero for every other class
    values = aten.unsqueeze.default(aten.neg.default(aten.mul.Tensor(weights, scale)), class_dim)
    index = aten.unsqueeze.default(safe, class_dim)
    return aten.scatter.src(aten.zeros_like.default(a), class_dim, index, values)


@to_prims("aten::mse_loss_backward.default")
def _mse_loss_backward(
    grad: torch.Tensor, a: torch.Tensor, target: torch.Tensor, reduction: int
) -> torch.Tensor:
    scale = 2.0 / a.numel() if reduction == MEAN else 2.0
    difference = aten.sub.Tensor(a, target)
    return aten.mul.Tensor(aten.mul.Scalar(difference, scale), grad)
