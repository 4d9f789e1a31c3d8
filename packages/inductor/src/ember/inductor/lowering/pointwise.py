"""Lowerings of elementwise prims: each becomes a lazy index function over its inputs.

Inputs are broadcast (prims already match shapes; 0-d tensors broadcast) and cast to the
dtype the op computes in: the output dtype, or for comparisons the inputs' common dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch

from ember.inductor.ir import body
from ember.inductor.ir.indexing import as_expr
from ember.inductor.ir.ops import BINARY_OPS, BOOLEAN_UNARY_OPS, COMPARISON_OPS, UNARY_OPS
from ember.inductor.ir.tensors import Lazy, TensorValue, lazy
from ember.inductor.lowering.graph_lowering import LoweringContext, Unlowerable, broadcast_loader
from ember.inductor.lowering.table import lowers


def pointwise(
    ctx: LoweringContext,
    inputs: Sequence[TensorValue],
    compute: Any,
    compute_dtype: torch.dtype | None = None,
) -> Lazy:
    """A lazy tensor of the node's output spec whose element is `compute(loaded inputs)`."""
    spec = ctx.output_spec()
    size = tuple(as_expr(s) for s in spec.shape)
    dtype = spec.dtype
    cast = compute_dtype or dtype
    loaders = [broadcast_loader(value, size) for value in inputs]

    def fn(index: body.Index) -> body.BodyValue:
        return body.to_dtype(compute(*[body.to_dtype(ld(index), cast) for ld in loaders]), dtype)

    return lazy(dtype, size, fn, inputs, ctx.origin())


def _unary(op: str) -> None:
    @lowers(f"prims::{op}")
    def lower(ctx: LoweringContext, a: TensorValue) -> Lazy:
        cast = a.dtype if op in BOOLEAN_UNARY_OPS or op in {"bitwise_not"} else None
        return pointwise(ctx, [a], lambda x: body.unary(op, x), cast)


def _binary(op: str) -> None:
    @lowers(f"prims::{op}")
    def lower(ctx: LoweringContext, a: TensorValue, b: TensorValue) -> Lazy:
        cast = torch.promote_types(a.dtype, b.dtype) if op in COMPARISON_OPS else None
        return pointwise(ctx, [a, b], lambda x, y: body.binary(op, x, y), cast)


for _op in UNARY_OPS:
    if _op != "logical_not":
        _unary(_op)
for _op in BINARY_OPS:
    if _op not in {"logical_and", "logical_or"}:
        _binary(_op)


@lowers("prims::where")
def where(ctx: LoweringContext, pred: TensorValue, a: TensorValue, b: TensorValue) -> Lazy:
    dtype = ctx.output_spec().dtype
    spec_size = tuple(as_expr(s) for s in ctx.output_spec().shape)
    loaders = [broadcast_loader(v, spec_size) for v in (pred, a, b)]

    def fn(index: body.Index) -> body.BodyValue:
        condition = body.to_dtype(loaders[0](index), torch.bool)
        return body.where(
            condition,
            body.to_dtype(loaders[1](index), dtype),
            body.to_dtype(loaders[2](index), dtype),
        )

    return lazy(dtype, spec_size, fn, [pred, a, b], ctx.origin())


@lowers("prims::convert_element_type")
def convert_element_type(ctx: LoweringContext, a: TensorValue, dtype: torch.dtype) -> Lazy:
    return pointwise(ctx, [a], lambda x: x, a.dtype)


@lowers("prims::clone")
def clone(ctx: LoweringContext, a: TensorValue, **_: Any) -> Lazy:
    return pointwise(ctx, [a], lambda x: x)


def _size_value(value: sympy.Expr, dtype: torch.dtype) -> body.BodyValue:
    """A fill value computed from sizes: an integer expression as an index; in a floating
    dtype, other expressions (a variance's `1/(s0*s2 - 1)`, attention's scale `s2**-0.25`)
    as floating arithmetic over integer index expressions."""
    if value.is_integer:
        return body.index_expr(value, dtype)
    if not dtype.is_floating_point:
        raise Unlowerable(f"a fill value {value} over sizes in {dtype}")
    return _floating(value, dtype)


def _floating(value: sympy.Expr, dtype: torch.dtype) -> body.BodyValue:
    if value.is_integer:
        return body.index_expr(value, dtype)
    if value.is_Number:
        return body.constant(float(value), dtype)
    if isinstance(value, (sympy.Add, sympy.Mul)):
        op = "add" if isinstance(value, sympy.Add) else "mul"
        parts = [_floating(arg, dtype) for arg in value.args]
        result = parts[0]
        for part in parts[1:]:
            result = body.binary(op, result, part)
        return result
    if isinstance(value, sympy.Pow) and value.exp.is_Number:
        base = _floating(value.base, dtype)
        if value.exp == -1:
            return body.binary("div", body.constant(1.0, dtype), base)
        return body.binary("pow", base, body.constant(float(value.exp), dtype))
    raise Unlowerable(f"a fill value {value} over sizes")


@lowers("prims::full")
def full(ctx: LoweringContext, shape: Sequence[Any], value: Any, **_: Any) -> Lazy:
    spec = ctx.output_spec()
    size = tuple(as_expr(s) for s in spec.shape)
    dtype = spec.dtype
    if isinstance(value, sympy.Basic):
        element = _size_value(sympy.sympify(value), dtype)
        return lazy(dtype, size, lambda index: element, [], ctx.origin())
    if isinstance(value, complex):
        raise Unlowerable("complex fill value")
    if dtype.is_floating_point:
        value = float(value)
    elif dtype == torch.bool:
        value = bool(value)
    else:
        value = int(value)
    element = body.constant(value, dtype)
    return lazy(dtype, size, lambda index: element, [], ctx.origin())


@lowers("prims::iota")
def iota(ctx: LoweringContext, length: Any, start: Any, step: Any, **_: Any) -> Lazy:
    spec = ctx.output_spec()
    dtype = spec.dtype
    if not all(isinstance(v, (int, sympy.Expr)) for v in (start, step)):
        raise Unlowerable("non-integer iota")

    def fn(index: body.Index) -> body.BodyValue:
        return body.index_expr(as_expr(start) + as_expr(step) * index[0], dtype)

    return lazy(dtype, (as_expr(length),), fn, [], ctx.origin())
