"""Lowerings of reduction prims: each becomes a reduction node whose body inlines its input
(so pointwise producers fuse into the reduction as a prologue) and whose result is a buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
import torch

from ember.inductor.ir import body
from ember.inductor.ir.indexing import Expr, as_expr, product
from ember.inductor.ir.tensors import Lazy, StorageView, TensorValue, lazy
from ember.inductor.lowering.graph_lowering import LoweringContext, Unlowerable
from ember.inductor.lowering.table import lowers


def reduce(
    ctx: LoweringContext,
    a: TensorValue,
    dims: Sequence[int],
    reduction_type: str,
    dtype: torch.dtype,
    prologue: body.Loader | None = None,
) -> StorageView:
    """Reduce `a` over `dims` (dropped from the result); `prologue` maps each element first."""
    ndim = len(a.size)
    reduced = sorted({d % ndim for d in dims}) if ndim else []
    kept = [d for d in range(ndim) if d not in reduced]
    ranges = [a.size[d] for d in kept]
    reduction_ranges = [a.size[d] for d in reduced]
    load = prologue or a.loader()

    def fn(index: body.Index) -> body.BodyValue:
        full: list[Expr] = [sympy.S.Zero] * ndim
        for d, i in zip(kept, index[: len(kept)]):
            full[d] = i
        for d, r in zip(reduced, index[len(kept) :]):
            full[d] = r
        return body.to_dtype(
            load(full), dtype if reduction_type not in {"argmax", "argmin"} else a.dtype
        )

    pending = isinstance(a, Lazy) and a.realized is None
    origins = a.origins if isinstance(a, Lazy) and pending else ()
    sources = a.sources if isinstance(a, Lazy) and pending else ()
    return ctx.reduction(fn, ranges, reduction_ranges, reduction_type, dtype, origins, sources)


def _simple(name: str, reduction_type: str) -> None:
    @lowers(f"prims::{name}")
    def lower(ctx: LoweringContext, a: TensorValue, dims: Sequence[int]) -> StorageView:
        return reduce(ctx, a, dims, reduction_type, ctx.output_spec().dtype)


_simple("sum", "sum")
_simple("prod", "prod")
_simple("amax", "max")
_simple("amin", "min")


def _arg(name: str) -> None:
    @lowers(f"prims::{name}")
    def lower(ctx: LoweringContext, a: TensorValue, dim: int | None) -> StorageView:
        if dim is None or not a.size:
            raise Unlowerable("argmax over all elements")
        if a.dtype.is_floating_point is False and a.dtype != torch.int64:
            raise Unlowerable("integer argmax")
        return reduce(ctx, a, [dim], name, torch.int64)


_arg("argmax")
_arg("argmin")


@lowers("prims::var")
def var(ctx: LoweringContext, a: TensorValue, dims: Sequence[int], correction: float) -> Lazy:
    """Two passes: the mean, then the sum of squared deviations (numerically safe)."""
    dtype = ctx.output_spec().dtype
    if not dtype.is_floating_point:
        raise Unlowerable("integer var")
    ndim = len(a.size)
    reduced = sorted({d % ndim for d in dims})
    kept = [d for d in range(ndim) if d not in reduced]
    count: Expr = product([a.size[d] for d in reduced])
    total = reduce(ctx, a, dims, "sum", dtype)
    load_a, load_total = a.loader(), total.loader()

    def squared_deviation(index: body.Index) -> body.BodyValue:
        mean = body.binary(
            "div", load_total([index[d] for d in kept]), body.index_expr(count, dtype)
        )
        deviation = body.binary("sub", body.to_dtype(load_a(index), dtype), mean)
        return body.binary("mul", deviation, deviation)

    squares = reduce(ctx, a, dims, "sum", dtype, prologue=squared_deviation)
    load_squares = squares.loader()
    divisor = as_expr(count) - sympy.nsimplify(correction)

    def fn(index: body.Index) -> body.BodyValue:
        return body.binary("div", load_squares(index), body.index_expr(divisor, dtype))

    return lazy(dtype, squares.size, fn, [squares], ctx.origin())
