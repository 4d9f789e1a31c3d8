"""ATen ops that choose or bound values elementwise: where, masked_fill, clamp, lerp, addcmul,
addcdiv, nan_to_num, xlogy, heaviside, logaddexp and friends, written with prims.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ember.prims.decompositions.elementwise import (
    INT_TO_FLOAT,
    _register_with_inplace,
    binary,
    inplace,
)
from ember.prims.decompositions.operands import (
    Operand,
    broadcast,
    broadcast_shapes,
    convert,
    device_of,
    expand_to,
    result_type,
    scalar_like,
    to_float,
)
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims


@to_prims(
    "aten::where.self", "aten::where.ScalarSelf", "aten::where.ScalarOther", "aten::where.Scalar"
)
def where(condition: torch.Tensor, a: Operand, b: Operand) -> torch.Tensor:
    dtype = result_type(a, b)
    operands = (condition, a, b)
    shape = broadcast_shapes(*(o.shape for o in operands if isinstance(o, torch.Tensor)))
    device = device_of(*operands)
    pred = expand_to(condition, shape, torch.bool, device)
    return prims.where(pred, expand_to(a, shape, dtype, device), expand_to(b, shape, dtype, device))


def _masked_fill(a: torch.Tensor, mask: torch.Tensor, value: Operand) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        value = convert(value, a.dtype)
    elif not (a.dtype.is_floating_point or a.dtype.is_complex) and a.dtype != torch.bool:
        value = int(value)
    # the result takes the broadcast shape of a and mask (the in-place form keeps a's)
    shape = broadcast_shapes(a.shape, mask.shape)
    pred = expand_to(mask, shape, torch.bool, a.device)
    filler = expand_to(value, shape, a.dtype, a.device)
    return prims.where(pred, filler, expand_to(a, shape, a.dtype, a.device))


_register_with_inplace("masked_fill", ("Scalar", "Tensor"), _masked_fill)


def clamp(a: torch.Tensor, low: Operand = None, high: Operand = None) -> torch.Tensor:
    dtype = result_type(a, *(v for v in (low, high) if v is not None))
    (x,) = broadcast(a, dtype=dtype) if a.dtype != dtype else (a,)
    shape_ops = [v for v in (low, high) if isinstance(v, torch.Tensor)]
    if shape_ops:
        x = broadcast(x, *shape_ops, dtype=dtype)[0]
    for bound, prim in ((low, prims.maximum), (high, prims.minimum)):
        if bound is None:
            continue
        limit = broadcast(bound, x, dtype=dtype)[0]
        x = prim(x, limit)
        if isinstance(bound, torch.Tensor) and dtype.is_floating_point:
            x = prims.where(prims.isnan(limit), limit, x)  # a NaN bound gives NaN
    return x


_register_with_inplace("clamp", ("default", "Tensor"), clamp)
_register_with_inplace("clip", ("default", "Tensor"), clamp)
_register_with_inplace("clamp_min", ("default", "Tensor"), lambda a, low: clamp(a, low, None))
_register_with_inplace("clamp_max", ("default", "Tensor"), lambda a, high: clamp(a, None, high))


def _lerp(start: torch.Tensor, end: torch.Tensor, weight: Operand) -> torch.Tensor:
    x, y, w = broadcast(start, end, weight, dtype=result_type(start, end))
    diff = prims.sub(y, x)
    low = prims.add(x, prims.mul(w, diff))
    high = prims.sub(y, prims.mul(diff, prims.sub(scalar_like(1, w), w)))
    return prims.where(prims.lt(prims.abs(w), scalar_like(0.5, w)), low, high)


_register_with_inplace("lerp", ("Scalar", "Tensor"), _lerp)


def _addcmul(
    a: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, *, value: Any = 1
) -> torch.Tensor:
    x, y, z = broadcast(a, t1, t2)
    product = prims.mul(y, z)
    if value != 1:
        product = prims.mul(product, scalar_like(value, product))
    return prims.add(x, product)


def _addcdiv(
    a: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, *, value: Any = 1
) -> torch.Tensor:
    x, y, z = broadcast(a, t1, t2)
    quotient = prims.div(y, z)
    if value != 1:
        quotient = prims.mul(quotient, scalar_like(value, quotient))
    return prims.add(x, quotient)


_register_with_inplace("addcmul", ("default",), _addcmul)
_register_with_inplace("addcdiv", ("default",), _addcdiv)


def _nan_to_num(
    a: torch.Tensor,
    nan: float | None = 0.0,
    posinf: float | None = None,
    neginf: float | None = None,
) -> torch.Tensor:
    if not a.dtype.is_floating_point:
        return prims.clone(a)
    info = torch.finfo(a.dtype)
    a = prims.where(prims.isnan(a), scalar_like(0.0 if nan is None else nan, a), a)
    a = prims.where(
        prims.eq(a, scalar_like(math.inf, a)),
        scalar_like(info.max if posinf is None else posinf, a),
        a,
    )
    return prims.where(
        prims.eq(a, scalar_like(-math.inf, a)),
        scalar_like(info.min if neginf is None else neginf, a),
        a,
    )


_register_with_inplace("nan_to_num", ("default",), _nan_to_num)


def _xlogy(a: Operand, b: Operand) -> torch.Tensor:
    x, y = broadcast(a, b, dtype=to_float(result_type(a, b)))
    product = prims.mul(x, prims.log(y))
    zero = scalar_like(0, x)
    product = prims.where(prims.eq(x, zero), zero, product)
    return prims.where(prims.isnan(y), y, product)


_register_with_inplace("xlogy", ("Tensor", "Scalar_Other", "Scalar_Self"), _xlogy)
to_prims("aten::special_xlogy.default")(_xlogy)


@to_prims("aten::heaviside.default")
def _heaviside(a: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    x, v = broadcast(a, values)
    zero = scalar_like(0, x)
    step = convert(prims.gt(x, zero), x.dtype)
    return prims.where(prims.eq(x, zero), v, step)


@to_prims("aten::logaddexp.default")
def _logaddexp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x, y = broadcast(a, b, dtype=to_float(result_type(a, b)))
    high = prims.maximum(x, y)
    low = prims.minimum(x, y)
    same_inf = prims.bitwise_and(prims.isinf(high), prims.eq(x, y))
    result = prims.add(high, prims.log1p(prims.exp(prims.sub(low, high))))
    return prims.where(same_inf, x, result)


@to_prims("aten::logaddexp2.default")
def _logaddexp2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x, y = broadcast(a, b, dtype=to_float(result_type(a, b)))
    high = prims.maximum(x, y)
    low = prims.minimum(x, y)
    same_inf = prims.bitwise_and(prims.isinf(high), prims.eq(x, y))
    inv_ln2 = scalar_like(1 / math.log(2), x)
    result = prims.add(high, prims.mul(prims.log1p(prims.exp2(prims.sub(low, high))), inv_ln2))
    return prims.where(same_inf, x, result)


@to_prims("aten::frac.default")
def _frac(a: torch.Tensor) -> torch.Tensor:
    return prims.sub(a, prims.trunc(a))


to_prims("aten::frac_.default")(inplace(_frac))


@to_prims("aten::deg2rad.default")
def _deg2rad(a: torch.Tensor) -> torch.Tensor:
    return binary(prims.mul, a, math.pi / 180, INT_TO_FLOAT)


@to_prims("aten::rad2deg.default")
def _rad2deg(a: torch.Tensor) -> torch.Tensor:
    return binary(prims.mul, a, 180 / math.pi, INT_TO_FLOAT)


@to_prims("aten::sinc.default")
def _sinc(a: torch.Tensor) -> torch.Tensor:
    x = convert(a, to_float(a.dtype))
    pix = prims.mul(x, scalar_like(math.pi, x))
    value = prims.div(prims.sin(pix), pix)
    return prims.where(prims.eq(x, scalar_like(0, x)), scalar_like(1, x), value)


@to_prims(
    "aten::positive.default",
    "aten::alias.default",
    "aten::detach.default",
    "aten::lift_fresh.default",
    "aten::resolve_conj.default",
    "aten::resolve_neg.default",
)
def _identity(a: torch.Tensor) -> torch.Tensor:
    return a


@to_prims("aten::logit.default")
def _logit(a: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    x = convert(a, to_float(a.dtype))
    if eps is not None:
        x = clamp(x, eps, 1 - eps)
    return prims.log(prims.div(x, prims.sub(scalar_like(1, x), x)))


@to_prims("aten::special_entr.default")
def _entr(a: torch.Tensor) -> torch.Tensor:
    x = convert(a, to_float(a.dtype))
    zero = scalar_like(0, x)
    value = prims.neg(prims.mul(x, prims.log(x)))
    value = prims.where(prims.eq(x, zero), zero, value)
    return prims.where(prims.lt(x, zero), scalar_like(-math.inf, x), value)


@to_prims("aten::special_log_ndtr.default")
def _log_ndtr(a: torch.Tensor) -> torch.Tensor:
    x = convert(a, to_float(a.dtype))
    t = prims.mul(x, scalar_like(-1 / math.sqrt(2), x))
    return prims.log(prims.mul(prims.erfc(t), scalar_like(0.5, x)))


@to_prims("aten::special_ndtr.default")
def _ndtr(a: torch.Tensor) -> torch.Tensor:
    x = convert(a, to_float(a.dtype))
    t = prims.mul(x, scalar_like(1 / math.sqrt(2), x))
    return prims.mul(prims.add(scalar_like(1, x), prims.erf(t)), scalar_like(0.5, x))
