"""Lowerings of reduction prims: each becomes a reduction node whose body inlines its input
(so pointwise producers fuse into the reduction as a prologue) and whose result is a buffer.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import sympy
import torch

from ember.inductor.ir import body
from ember.inductor.ir.indexing import Expr, as_expr, index_var, product
from ember.inductor.ir.load_direction import load_directions
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
    count = product(reduction_ranges)
    small = isinstance(count, sympy.Integer) and 0 < count <= UNROLL
    if (
        reduction_type in UNROLLED
        and small
        and not _reads_along_reduced(fn, ranges, reduction_ranges)
    ):
        unrolled = lazy(dtype, ranges, _unrolled(fn, reduction_ranges, reduction_type), [a],
                        ctx.origin())  # fmt: skip
        unrolled.sources = sources
        return ctx.realize(unrolled, ctx.reduction_layout(dtype, tuple(ranges)))
    return ctx.reduction(fn, ranges, reduction_ranges, reduction_type, dtype, origins, sources)


# Max, min and their arguments over at most this many elements whose loads do not walk memory
# along the reduced dims (channels-last pooling windows: 3x3) are one pointwise expression per
# output, as torch.compile unrolls small reductions: a reduction tile of 16 lanes for 9 values
# put the threads along the window, not along the channels that a channels-last map holds
# contiguously (ResNet-50's stem max pooling: 0.79 ms on the H100). A row (a softmax's) stays
# a reduction, which its other reductions share.
UNROLL = 16
UNROLLED = ("max", "min", "argmax", "argmin")


def _reads_along_reduced(
    fn: body.Loader, ranges: Sequence[Expr], reduction_ranges: Sequence[Expr]
) -> bool:
    xs = [index_var("x", i) for i in range(len(ranges))]
    rs = [index_var("r", i) for i in range(len(reduction_ranges))]
    outputs = [x for x, size in zip(xs, ranges) if size != 1]
    reduced = [r for r, size in zip(rs, reduction_ranges) if size != 1]
    return load_directions([fn([*xs, *rs])], outputs, reduced)[1] > 0


def _unrolled(
    fn: body.Loader, reduction_ranges: Sequence[Expr], reduction_type: str
) -> body.Loader:
    """`fn` folded over every point of `reduction_ranges` with torch's semantics: max/min
    propagate NaN; argmax/argmin return the first extreme index, NaN counting as the most
    extreme (its first occurrence)."""
    points = [
        [sympy.Integer(i) for i in point]
        for point in itertools.product(*(range(int(r)) for r in reduction_ranges))
    ]
    larger = reduction_type in ("max", "argmax")

    def load(index: body.Index) -> body.BodyValue:
        values = [fn([*index, *point]) for point in points]
        if reduction_type in ("max", "min"):
            folded = values[0]
            for value in values[1:]:
                folded = body.binary("maximum" if larger else "minimum", folded, value)
            return folded
        best, position = values[0], body.constant(0, torch.int64)
        for k, value in enumerate(values[1:], start=1):
            take = body.binary("gt" if larger else "lt", value, best)
            if value.dtype.is_floating_point:
                nan_first = body.binary(
                    "logical_and",
                    body.unary("isnan", value),
                    body.unary("logical_not", body.unary("isnan", best)),
                )
                take = body.binary("logical_or", take, nan_first)
            best = body.where(take, value, best)
            position = body.where(take, body.constant(k, torch.int64), position)
        return position

    return load


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
    """One pass over `a` (the shifted-data algorithm): the sums of `x - k` and of its square,
    `k` the first element of each reduced slice, give `n * var = S2 - S1^2 / n`. The
    two-pass form (mean, then squared deviations) read `a` twice: batch norm's statistics in a
    ResNet-50 training step read each convolution's output three times (torch.compile's
    Welford reduction, twice). Both sums share one kernel.

    The subtraction cancels: the sums' rounding error grows by `1 + d^2 / var`, `d` the
    distance from `k` to the mean. With float32 sums that cost 20-40x eager's error on the
    variance of a convolution's output (its corners, where `k` sits, see the zero padding;
    batch-norm models' training loss error up to 13x eager's on the H100) and 5e-4 of the
    variance for data 1000 std from 0 with zero corners. So the differences, their squares and
    the sums are float64: `k` being an element of the slice, `d^2 <= n * var`, and float64's
    rounding amplified by `1 + n` stays under the float32 rounding of a two-pass or Welford
    kernel for any slice under 2^29 elements, whatever the data. Memory traffic is float32's:
    only a split reduction's partial sums double. That is the C++ form; code generators with
    `welford_reductions` (Triton) get one float32 welford_m2 reduction (`_welford_var`)."""
    dtype = ctx.output_spec().dtype
    if not dtype.is_floating_point:
        raise Unlowerable("integer var")
    ndim = len(a.size)
    reduced = sorted({d % ndim for d in dims})
    count: Expr = product([a.size[d] for d in reduced])
    divisor = as_expr(count) - sympy.nsimplify(correction)
    if ctx.welford_reductions:
        return _welford_var(ctx, a, dims, dtype, divisor)
    wide = torch.float64
    load_a = a.loader()

    def shifted(index: body.Index) -> body.BodyValue:
        pivot = [sympy.S.Zero if d in reduced else index[d] for d in range(ndim)]
        value = body.to_dtype(load_a(index), wide)
        return body.binary("sub", value, body.to_dtype(load_a(pivot), wide))

    def squared(index: body.Index) -> body.BodyValue:
        deviation = shifted(index)
        return body.binary("mul", deviation, deviation)

    total = reduce(ctx, a, dims, "sum", wide, prologue=shifted)
    squares = reduce(ctx, a, dims, "sum", wide, prologue=squared)
    load_total, load_squares = total.loader(), squares.loader()

    def fn(index: body.Index) -> body.BodyValue:
        shift = load_total(index)
        mean_square = body.binary("div", body.binary("mul", shift, shift),
                                  body.index_expr(count, wide))  # fmt: skip
        spread = body.binary("sub", load_squares(index), mean_square)
        # rounding may leave a constant slice a tiny negative sum; NaN stays NaN
        zero = body.constant(0.0, wide)
        spread = body.where(body.binary("lt", spread, zero), zero, spread)
        # the cancellation is done: divide at the output's precision (one float64 division
        # for each element of a kernel this inlines into, not two), float32 for bf16/fp16,
        # rounded once to the output as eager rounds (Triton's interpreter turns a direct
        # float64 -> bfloat16 cast into denormals)
        narrow = torch.float32 if dtype.itemsize < 4 else dtype
        quotient = body.binary("div", body.to_dtype(spread, narrow),
                               body.index_expr(divisor, narrow))  # fmt: skip
        return body.to_dtype(quotient, dtype)

    return lazy(dtype, squares.size, fn, [total, squares], ctx.origin())


def _welford_var(
    ctx: LoweringContext, a: TensorValue, dims: Sequence[int], dtype: torch.dtype, divisor: Expr
) -> Lazy:
    """The variance as one welford_m2 reduction (code generators with `welford_reductions`):
    float32 (float64 for float64 data), as accurate as eager's Welford kernel wherever the
    data sit, at float32's speed (the float64 shifted sums made ResNet-50's batch-norm
    statistics kernels 1.7x slower on the H100: 61 vs 36 us for a 51 MB map)."""
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    load_a = a.loader()

    def widened(index: body.Index) -> body.BodyValue:
        return body.to_dtype(load_a(index), wide)

    m2 = reduce(ctx, a, dims, "welford_m2", wide, prologue=widened)
    load_m2 = m2.loader()

    def fn(index: body.Index) -> body.BodyValue:
        quotient = body.binary("div", load_m2(index), body.index_expr(divisor, wide))
        return body.to_dtype(quotient, dtype)

    return lazy(dtype, m2.size, fn, [m2], ctx.origin())
