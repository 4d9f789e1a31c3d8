"""ATen normalization ops written with prims: batch norm (training and inference, with the
running-stat updates), layer norm, group norm, and the backward ops of batch and layer norm.

Statistics are computed in the input dtype (float32 in the tests) as mean and biased var.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.operands import scalar_like
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims

# Half-precision inputs are normalized in float32 (statistics stay float32, as eager's
# kernels keep them); the output takes the input's dtype again.
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _upcast(t: Any) -> Any:
    if isinstance(t, torch.Tensor) and t.dtype in _LOW_PRECISION:
        return prims.convert_element_type(t, torch.float32)
    return t


def _cast(t: Any, dtype: torch.dtype) -> Any:
    if isinstance(t, torch.Tensor) and t.dtype != dtype:
        return prims.convert_element_type(t, dtype)
    return t


def _per_channel(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return prims.broadcast_in_dim(t, list(like.shape), [1])


def _batch_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any, Any]:
    dtype = x.dtype
    running_dtype = None if running_mean is None else running_mean.dtype
    x, weight, bias = _upcast(x), _upcast(weight), _upcast(bias)
    running_mean, running_var = _upcast(running_mean), _upcast(running_var)
    reduce_dims = [0, *range(2, x.dim())]
    count = x.numel() // x.shape[1]
    if training:
        mean = prims.div(
            prims.sum(x, reduce_dims),
            prims.full([x.shape[1]], count, dtype=x.dtype, device=x.device),
        )
        centered = prims.sub(x, _per_channel(mean, x))
        # one prim, not the sum of squared deviations: a code generator may compute it in
        # the pass over x that sums it (ember-inductor does)
        var = prims.var(x, reduce_dims, 0.0)
        invstd = prims.rsqrt(prims.add(var, scalar_like(eps, var)))
        new_mean = new_var = None
        if running_mean is not None and running_var is not None:
            unbiased = prims.mul(var, scalar_like(count / max(count - 1, 1), var))
            keep = scalar_like(1 - momentum, running_mean)
            new_mean = prims.add(
                prims.mul(running_mean, keep), prims.mul(mean, scalar_like(momentum, mean))
            )
            new_var = prims.add(
                prims.mul(running_var, keep), prims.mul(unbiased, scalar_like(momentum, unbiased))
            )
        save_mean, save_invstd = mean, invstd
    else:
        assert running_mean is not None and running_var is not None
        mean, var = running_mean, running_var
        invstd = prims.rsqrt(prims.add(var, scalar_like(eps, var)))
        centered = prims.sub(x, _per_channel(mean, x))
        new_mean = new_var = None
        save_mean = prims.full([0], 0, dtype=x.dtype, device=x.device)
        save_invstd = prims.full([0], 0, dtype=x.dtype, device=x.device)
    out = prims.mul(centered, _per_channel(invstd, x))
    if weight is not None:
        out = prims.mul(out, _per_channel(weight, x))
    if bias is not None:
        out = prims.add(out, _per_channel(bias, x))
    if running_dtype is not None:
        new_mean, new_var = _cast(new_mean, running_dtype), _cast(new_var, running_dtype)
    return _cast(out, dtype), save_mean, save_invstd, new_mean, new_var


@to_prims("aten::native_batch_norm.default", "aten::_native_batch_norm_legit_no_training.default")
def _native_batch_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not isinstance(training, bool):  # _legit_no_training has no `training` argument
        training, momentum, eps = False, training, momentum
    out, save_mean, save_invstd, new_mean, new_var = _batch_norm(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    if new_mean is not None and running_mean is not None and running_var is not None:
        prims.copy_to(running_mean, new_mean)
        prims.copy_to(running_var, new_var)
    return out, save_mean, save_invstd


@to_prims("aten::_native_batch_norm_legit.default")
def _native_batch_norm_legit(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)


@to_prims("aten::_native_batch_norm_legit_functional.default")
def _native_batch_norm_functional(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[Any, ...]:
    out, save_mean, save_invstd, new_mean, new_var = _batch_norm(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    return (
        out,
        save_mean,
        save_invstd,
        new_mean if new_mean is not None else prims.clone(running_mean),
        new_var if new_var is not None else prims.clone(running_var),
    )


@to_prims("aten::native_batch_norm_backward.default")
def _native_batch_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    save_mean: torch.Tensor | None,
    save_invstd: torch.Tensor | None,
    train: bool,
    eps: float,
    output_mask: Sequence[bool],
) -> tuple[Any, Any, Any]:
    dtypes = (x.dtype, None if weight is None else weight.dtype)
    grad, x, weight = _upcast(grad), _upcast(x), _upcast(weight)
    running_mean, running_var = _upcast(running_mean), _upcast(running_var)
    save_mean, save_invstd = _upcast(save_mean), _upcast(save_invstd)
    reduce_dims = [0, *range(2, x.dim())]
    count = x.numel() // x.shape[1]
    if train:
        assert save_mean is not None and save_invstd is not None
        mean, invstd = save_mean, save_invstd
    else:
        assert running_mean is not None and running_var is not None
        mean = running_mean
        invstd = prims.rsqrt(prims.add(running_var, scalar_like(eps, running_var)))
    centered = prims.sub(x, _per_channel(mean, x))
    grad_sum = prims.sum(grad, reduce_dims)
    dot = prims.sum(prims.mul(grad, centered), reduce_dims)
    scale = invstd if weight is None else prims.mul(invstd, weight)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        if train:
            n = scalar_like(1 / count, grad_sum)
            grad_mean = prims.mul(grad_sum, n)
            proj = prims.mul(prims.mul(dot, n), prims.mul(invstd, invstd))
            inner = prims.sub(
                prims.sub(grad, prims.mul(centered, _per_channel(proj, x))),
                _per_channel(grad_mean, x),
            )
            grad_input = prims.mul(inner, _per_channel(scale, x))
        else:
            grad_input = prims.mul(grad, _per_channel(scale, x))
    if output_mask[1]:
        grad_weight = prims.mul(dot, invstd)
    if output_mask[2]:
        grad_bias = grad_sum
    weight_dtype = dtypes[1] or dtypes[0]
    return (
        _cast(grad_input, dtypes[0]),
        _cast(grad_weight, weight_dtype),
        _cast(grad_bias, weight_dtype),
    )


@to_prims("aten::native_layer_norm.default")
def _native_layer_norm(
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dtype = x.dtype
    x, weight, bias = _upcast(x), _upcast(weight), _upcast(bias)
    axis = x.dim() - len(normalized_shape)
    dims = list(range(axis, x.dim()))
    count = 1
    for size in normalized_shape:
        count *= size
    stats_shape = [*x.shape[:axis], *([1] * len(dims))]
    mean = prims.div(
        prims.sum(x, dims), prims.full(list(x.shape[:axis]), count, dtype=x.dtype, device=x.device)
    )
    mean_kept = prims.view(mean, stats_shape)
    centered = prims.sub(x, prims.broadcast_in_dim(mean_kept, list(x.shape), list(range(x.dim()))))
    var = prims.div(
        prims.sum(prims.mul(centered, centered), dims),
        prims.full(list(x.shape[:axis]), count, dtype=x.dtype, device=x.device),
    )
    rstd = prims.view(prims.rsqrt(prims.add(var, scalar_like(eps, var))), stats_shape)
    out = prims.mul(centered, prims.broadcast_in_dim(rstd, list(x.shape), list(range(x.dim()))))
    if weight is not None:
        out = prims.mul(out, prims.broadcast_in_dim(weight, list(x.shape), dims))
    if bias is not None:
        out = prims.add(out, prims.broadcast_in_dim(bias, list(x.shape), dims))
    return _cast(out, dtype), mean_kept, rstd


@to_prims("aten::native_layer_norm_backward.default")
def _native_layer_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    output_mask: Sequence[bool],
) -> tuple[Any, Any, Any]:
    dtypes = [t.dtype if t is not None else None for t in (x, weight, bias)]
    grad, x, weight = _upcast(grad), _upcast(x), _upcast(weight)
    mean, rstd = _upcast(mean), _upcast(rstd)
    axis = x.dim() - len(normalized_shape)
    inner = list(range(axis, x.dim()))
    outer = list(range(axis))
    count = 1
    for size in normalized_shape:
        count *= size
    every = list(range(x.dim()))
    shape = list(x.shape)
    x_hat = prims.mul(
        prims.sub(x, prims.broadcast_in_dim(mean, shape, every)),
        prims.broadcast_in_dim(rstd, shape, every),
    )
    grad_x_hat = (
        grad if weight is None else prims.mul(grad, prims.broadcast_in_dim(weight, shape, inner))
    )
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        stats = [*x.shape[:axis], *([1] * len(inner))]
        a = prims.view(prims.sum(grad_x_hat, inner), stats)
        b = prims.view(prims.sum(prims.mul(grad_x_hat, x_hat), inner), stats)
        scaled = prims.sub(
            prims.sub(
                prims.mul(grad_x_hat, scalar_like(count, grad_x_hat)),
                prims.broadcast_in_dim(a, shape, every),
            ),
            prims.mul(x_hat, prims.broadcast_in_dim(b, shape, every)),
        )
        factor = prims.div(rstd, prims.full(stats, count, dtype=rstd.dtype, device=rstd.device))
        grad_input = prims.mul(scaled, prims.broadcast_in_dim(factor, shape, every))
    if output_mask[1] and weight is not None:
        grad_weight = prims.sum(prims.mul(grad, x_hat), outer)
    if output_mask[2] and bias is not None:
        grad_bias = prims.sum(grad, outer)
    return tuple(
        _cast(g, d) if d is not None else g
        for g, d in zip((grad_input, grad_weight, grad_bias), dtypes)
    )  # type: ignore[return-value]


@to_prims("aten::native_group_norm.default")
def _native_group_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    n: int,
    c: int,
    hw: int,
    group: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # statistics and normalization in float32 for 16-bit inputs, as eager's kernels compute
    # them (a float16 sum over a group of 40,000 values near 100 overflowed: NaN outputs)
    dtype = x.dtype
    x, weight, bias = _upcast(x), _upcast(weight), _upcast(bias)
    grouped = prims.reshape(x, [n, group, (c // group) * hw])
    count = (c // group) * hw
    mean = prims.div(
        prims.sum(grouped, [2]), prims.full([n, group], count, dtype=x.dtype, device=x.device)
    )
    centered = prims.sub(grouped, prims.broadcast_in_dim(mean, [n, group, count], [0, 1]))
    var = prims.div(
        prims.sum(prims.mul(centered, centered), [2]),
        prims.full([n, group], count, dtype=x.dtype, device=x.device),
    )
    rstd = prims.rsqrt(prims.add(var, scalar_like(eps, var)))
    normed = prims.mul(centered, prims.broadcast_in_dim(rstd, [n, group, count], [0, 1]))
    out = prims.reshape(normed, list(x.shape))
    if weight is not None:
        out = prims.mul(out, prims.broadcast_in_dim(weight, list(x.shape), [1]))
    if bias is not None:
        out = prims.add(out, prims.broadcast_in_dim(bias, list(x.shape), [1]))
    return _cast(out, dtype), _cast(mean, dtype), _cast(rstd, dtype)


@to_prims("aten::_batch_norm_with_update.default")
def _batch_norm_with_update(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, ...]:
    out, mean, invstd = torch.ops.aten._native_batch_norm_legit.default(
        x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    reserve = torch.ops.aten.empty.memory_format([0], dtype=torch.uint8, device=x.device)
    return out, mean, invstd, reserve


@to_prims("aten::_batch_norm_with_update_functional.default")
def _batch_norm_with_update_functional(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, ...]:
    """The pure twin: the new running statistics are its last two results."""
    out, mean, invstd, new_mean, new_var = (
        torch.ops.aten._native_batch_norm_legit_functional.default(
            x, weight, bias, running_mean, running_var, True, momentum, eps
        )
    )
    reserve = torch.ops.aten.empty.memory_format([0], dtype=torch.uint8, device=x.device)
    return out, mean, invstd, reserve, new_mean, new_var
