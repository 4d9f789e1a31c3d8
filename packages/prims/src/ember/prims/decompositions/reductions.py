"""ATen reductions written with reduction prims: sum, mean, prod, amax/amin, max/min with
indices, argmax/argmin, var/std (and their _mean forms), any/all, logsumexp, norms, cumulative
ops, sort/topk, softmax and log_softmax with their backward ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ember.prims.decompositions.elementwise import binary
from ember.prims.decompositions.operands import (
    broadcast,
    canonical_dim,
    canonical_dims,
    convert,
    scalar_like,
    to_float,
)
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import Prim, prims


def keep_dims(result: torch.Tensor, source_ndim: int, dims: list[int]) -> torch.Tensor:
    """Put size-1 dims back where `dims` were reduced (keepdim=True)."""
    for dim in sorted(dims):
        if source_ndim:
            result = prims.unsqueeze(result, dim)
    return result


def reduce(
    prim: Callable[..., torch.Tensor], a: torch.Tensor, dims: Any, keepdim: bool = False
) -> torch.Tensor:
    """prim over dims (None or [] meaning every dim), then keepdim."""
    wrapped = canonical_dims(dims, a.dim())
    result = prim(a, wrapped)
    return keep_dims(result, a.dim(), wrapped) if keepdim else result


def _sum_dtype(a: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    return a.dtype if a.dtype.is_floating_point or a.dtype.is_complex else torch.int64


@to_prims("aten::sum.dim_IntList")
def sum_dims(
    a: torch.Tensor, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    return reduce(prims.sum, convert(a, _sum_dtype(a, dtype)), dim, keepdim)


@to_prims("aten::sum.default")
def _sum(a: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return sum_dims(a, None, False, dtype=dtype)


@to_prims("aten::nansum.default")
def _nansum(
    a: torch.Tensor, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    if a.dtype.is_floating_point:
        a = prims.where(prims.isnan(a), scalar_like(0, a), a)
    return sum_dims(a, dim, keepdim, dtype=dtype)


_HALF = (torch.float16, torch.bfloat16)


def _count(a: torch.Tensor, dims: list[int]) -> int:
    return math.prod(a.shape[d] for d in dims) if a.dim() else 1


@to_prims("aten::mean.dim")
def mean_dims(
    a: torch.Tensor, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    dtype = dtype or a.dtype
    count = _count(a, canonical_dims(dim, a.dim()))
    if dtype in _HALF:
        # eager sums 16-bit values in float32 and rounds the mean once: a float16 sum of
        # 40,000 values near 100 overflows to inf where the mean is 100
        total = sum_dims(convert(a, torch.float32), dim, keepdim)
        return convert(prims.div(total, scalar_like(count, total)), dtype)
    total = sum_dims(convert(a, dtype), dim, keepdim)
    return prims.div(total, scalar_like(count, total))


@to_prims("aten::mean.default")
def _mean(a: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return mean_dims(a, None, False, dtype=dtype)


@to_prims("aten::prod.dim_int")
def _prod_dim(
    a: torch.Tensor, dim: int, keepdim: bool = False, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    return reduce(prims.prod, convert(a, _sum_dtype(a, dtype)), [dim], keepdim)


@to_prims("aten::prod.default")
def _prod(a: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return reduce(prims.prod, convert(a, _sum_dtype(a, dtype)), None)


@to_prims("aten::amax.default")
def amax(a: torch.Tensor, dim: Any = (), keepdim: bool = False) -> torch.Tensor:
    return reduce(prims.amax, a, dim, keepdim)


@to_prims("aten::amin.default")
def amin(a: torch.Tensor, dim: Any = (), keepdim: bool = False) -> torch.Tensor:
    return reduce(prims.amin, a, dim, keepdim)


to_prims("aten::max.default")(lambda a: reduce(prims.amax, a, None))
to_prims("aten::min.default")(lambda a: reduce(prims.amin, a, None))


def _arg(prim: Prim, a: torch.Tensor, dim: int | None, keepdim: bool) -> torch.Tensor:
    if dim is None:
        flat = prims.reshape(a, [a.numel()]) if a.dim() != 1 else a
        result = prim(flat, 0)
        if keepdim:
            result = prims.reshape(result, [1] * a.dim())
        return result
    wrapped = canonical_dim(dim, a.dim())
    result = prim(a, wrapped)
    return keep_dims(result, a.dim(), [wrapped]) if keepdim else result


to_prims("aten::argmax.default")(
    lambda a, dim=None, keepdim=False: _arg(prims.argmax, a, dim, keepdim)
)
to_prims("aten::argmin.default")(
    lambda a, dim=None, keepdim=False: _arg(prims.argmin, a, dim, keepdim)
)


@to_prims("aten::max.dim")
def _max_dim(a: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return reduce(prims.amax, a, [dim], keepdim), _arg(prims.argmax, a, dim, keepdim)


@to_prims("aten::min.dim")
def _min_dim(a: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return reduce(prims.amin, a, [dim], keepdim), _arg(prims.argmin, a, dim, keepdim)


@to_prims("aten::aminmax.default")
def _aminmax(
    a: torch.Tensor, *, dim: int | None = None, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    dims = None if dim is None else [dim]
    return reduce(prims.amin, a, dims, keepdim), reduce(prims.amax, a, dims, keepdim)


def _correction(correction: Any, unbiased: bool | None = None) -> float:
    if correction is not None:
        return float(correction)
    return 0.0 if unbiased is False else 1.0


@to_prims("aten::var.correction")
def var(
    a: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False
) -> torch.Tensor:
    x = convert(a, to_float(a.dtype))
    return reduce(lambda t, dims: prims.var(t, dims, _correction(correction)), x, dim, keepdim)


@to_prims("aten::std.correction")
def _std(
    a: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False
) -> torch.Tensor:
    return prims.sqrt(var(a, dim, correction=correction, keepdim=keepdim))


@to_prims("aten::var_mean.correction")
def _var_mean(
    a: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    return var(a, dim, correction=correction, keepdim=keepdim), mean_dims(a, dim, keepdim)


@to_prims("aten::std_mean.correction")
def _std_mean(
    a: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    variance = var(a, dim, correction=correction, keepdim=keepdim)
    return prims.sqrt(variance), mean_dims(a, dim, keepdim)


def _truth(a: torch.Tensor) -> torch.Tensor:
    return a if a.dtype == torch.bool else prims.ne(a, scalar_like(0, a))


def _any_all(prim: Prim, a: torch.Tensor, dim: Any, keepdim: bool) -> torch.Tensor:
    result = reduce(prim, _truth(a), dim, keepdim)
    return result if a.dtype != torch.uint8 else convert(result, torch.uint8)


to_prims("aten::any.default")(lambda a: _any_all(prims.amax, a, None, False))
to_prims("aten::any.dim", "aten::any.dims")(
    lambda a, dim=None, keepdim=False: _any_all(prims.amax, a, dim, keepdim)
)
to_prims("aten::all.default")(lambda a: _any_all(prims.amin, a, None, False))
to_prims("aten::all.dim", "aten::all.dims")(
    lambda a, dim=None, keepdim=False: _any_all(prims.amin, a, dim, keepdim)
)


@to_prims("aten::count_nonzero.dim_IntList", "aten::count_nonzero.default")
def _count_nonzero(a: torch.Tensor, dim: Any = None) -> torch.Tensor:
    return sum_dims(convert(_truth(a), torch.int64), dim)


@to_prims("aten::logsumexp.default")
def logsumexp(a: torch.Tensor, dim: Any, keepdim: bool = False) -> torch.Tensor:
    x = convert(a, to_float(a.dtype))
    dims = canonical_dims(dim, x.dim())
    if x.dim() and any(x.shape[d] == 0 for d in dims):
        return sum_dims(prims.exp(x), dims, keepdim)
    high = keep_dims(prims.amax(x, dims), x.dim(), dims)
    high = prims.where(prims.isinf(high), scalar_like(0, high), high)
    shifted = prims.exp(prims.sub(x, broadcast(high, x)[0]))
    total = prims.log(prims.sum(shifted, dims))
    result = prims.add(total, prims.squeeze(high, dims) if x.dim() else high)
    return keep_dims(result, x.dim(), dims) if keepdim else result


@to_prims("aten::linalg_vector_norm.default")
def _vector_norm(
    a: torch.Tensor,
    ord: float = 2,
    dim: Any = None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    x = prims.abs(convert(a, dtype or to_float(a.dtype)))
    if ord == math.inf:
        return reduce(prims.amax, x, dim, keepdim)
    if ord == -math.inf:
        return reduce(prims.amin, x, dim, keepdim)
    if ord == 0:
        return sum_dims(convert(prims.ne(x, scalar_like(0, x)), x.dtype), dim, keepdim)
    if ord == 1:
        return sum_dims(x, dim, keepdim)
    if ord == 2:
        return prims.sqrt(sum_dims(prims.mul(x, x), dim, keepdim))
    powered = sum_dims(prims.pow(x, scalar_like(ord, x)), dim, keepdim)
    return prims.pow(powered, scalar_like(1.0 / ord, powered))


def _scan(prim: Prim, a: torch.Tensor, dim: int, dtype: torch.dtype | None) -> torch.Tensor:
    x = convert(a, _sum_dtype(a, dtype))
    if x.dim() == 0:
        return prims.clone(x)
    return prim(x, canonical_dim(dim, x.dim()))


to_prims("aten::cumsum.default")(lambda a, dim, *, dtype=None: _scan(prims.cumsum, a, dim, dtype))
to_prims("aten::cumprod.default")(lambda a, dim, *, dtype=None: _scan(prims.cumprod, a, dim, dtype))


@to_prims("aten::logcumsumexp.default")
def _logcumsumexp(a: torch.Tensor, dim: int) -> torch.Tensor:
    if a.dim() == 0:
        return prims.clone(a)
    d = canonical_dim(dim, a.dim())
    high = keep_dims(prims.amax(a, [d]), a.dim(), [d]) if a.shape[d] else None
    if high is None:
        return prims.clone(a)
    high = prims.where(prims.isinf(high), scalar_like(0, high), high)
    high = broadcast(high, a)[0]
    return prims.add(prims.log(prims.cumsum(prims.exp(prims.sub(a, high)), d)), high)


@to_prims("aten::sort.default", "aten::sort.stable")
def sort(
    a: torch.Tensor, dim: int = -1, descending: bool = False, *, stable: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(dim, bool):  # sort.stable(self, *, stable, dim, descending) positional quirk
        dim = -1
    if a.dim() == 0:
        return prims.clone(a), prims.full([], 0, dtype=torch.int64, device=a.device)
    return prims.sort(a, canonical_dim(dim, a.dim()), descending)


@to_prims("aten::topk.default")
def _topk(
    a: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = sort(a, dim, largest)
    if a.dim() == 0:
        return values, indices
    d = canonical_dim(dim, a.dim())
    start = [0] * a.dim()
    limit = list(a.shape)
    limit[d] = k
    return prims.slice(values, start, limit), prims.slice(indices, start, limit)


@to_prims("aten::_softmax.default")
def softmax(a: torch.Tensor, dim: int, half_to_float: bool = False) -> torch.Tensor:
    if a.dim() == 0:
        return prims.full([], 1.0, dtype=a.dtype, device=a.device)
    d = canonical_dim(dim, a.dim())
    high = broadcast(keep_dims(prims.amax(a, [d]), a.dim(), [d]), a)[0]
    shifted = prims.exp(prims.sub(a, high))
    total = broadcast(keep_dims(prims.sum(shifted, [d]), a.dim(), [d]), a)[0]
    return prims.div(shifted, total)


@to_prims("aten::_log_softmax.default")
def log_softmax(a: torch.Tensor, dim: int, half_to_float: bool = False) -> torch.Tensor:
    if a.dim() == 0:
        return prims.full([], 0.0, dtype=a.dtype, device=a.device)
    d = canonical_dim(dim, a.dim())
    high = broadcast(keep_dims(prims.amax(a, [d]), a.dim(), [d]), a)[0]
    shifted = prims.sub(a, high)
    total = prims.log(prims.sum(prims.exp(shifted), [d]))
    return prims.sub(shifted, broadcast(keep_dims(total, a.dim(), [d]), a)[0])


@to_prims("aten::_softmax_backward_data.default")
def _softmax_backward(
    grad: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype
) -> torch.Tensor:
    product = prims.mul(grad, output)
    if output.dim() == 0:
        return prims.sub(product, prims.mul(output, product))
    d = canonical_dim(dim, output.dim())
    total = broadcast(keep_dims(prims.sum(product, [d]), output.dim(), [d]), output)[0]
    return convert(prims.sub(product, prims.mul(output, total)), input_dtype)


@to_prims("aten::_log_softmax_backward_data.default")
def _log_softmax_backward(
    grad: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype
) -> torch.Tensor:
    if output.dim() == 0:
        return binary(prims.mul, grad, 0)
    d = canonical_dim(dim, output.dim())
    total = broadcast(keep_dims(prims.sum(grad, [d]), output.dim(), [d]), output)[0]
    return convert(prims.sub(grad, prims.mul(prims.exp(output), total)), input_dtype)


@to_prims("aten::_safe_softmax.default")
def _safe_softmax(a: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    x = convert(a, dtype or a.dtype)
    if x.dim() == 0:
        return softmax(x, 0)
    d = canonical_dim(dim, x.dim())
    masked = keep_dims(prims.amin(prims.isinf(x), [d]), x.dim(), [d])
    all_masked = prims.bitwise_and(
        broadcast(masked, x, dtype=torch.bool)[0], prims.lt(x, scalar_like(0, x))
    )
    return prims.where(all_masked, scalar_like(0, x), softmax(x, d))
