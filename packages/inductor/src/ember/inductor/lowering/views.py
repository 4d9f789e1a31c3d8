"""Lowerings of view prims. A view of memory stays a view of the same storage with a new
layout (so it aliases, as in eager); a view of a lazy tensor is an index function over it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy

from ember.inductor.ir import body
from ember.inductor.ir.indexing import Expr, as_expr, contiguous_strides, flat_index, unflatten
from ember.inductor.ir.tensors import Layout, Lazy, Relayout, StorageView, TensorValue, view_of
from ember.inductor.lowering.graph_lowering import LoweringContext, storage_offset
from ember.inductor.lowering.layout_geometry import spec_layout
from ember.inductor.lowering.table import lowers
from ember.prims import Ref


def _view(
    value: TensorValue,
    size: Sequence[Expr],
    to_input: Any,
    relayout: Relayout,
) -> TensorValue:
    """A storage view with the layout `relayout` gives when `value` is memory, else an index
    function; a view of a lazy value keeps `relayout`, so that realizing it can take a view
    of its base's memory instead (`LoweringContext.realize`)."""
    if isinstance(value, StorageView):
        layout = relayout(value)
        if layout is not None:
            return StorageView(value.storage, layout)
    load = value.loader()
    result = view_of(value, size, lambda index: load(to_input(index)))
    if isinstance(value, Lazy) and value.realized is None:
        result.view = (value, relayout)
    return result


def _no_layout(base: StorageView) -> None:
    return None


@lowers("prims::broadcast_in_dim")
def broadcast_in_dim(
    ctx: LoweringContext, a: TensorValue, shape: Sequence[Any], broadcast_dimensions: Sequence[int]
) -> TensorValue:
    size = tuple(as_expr(s) for s in shape)
    own = a.size

    def to_input(index: body.Index) -> list[Expr]:
        return [
            sympy.S.Zero if own[k] == 1 and size[d] != 1 else index[d]
            for k, d in enumerate(broadcast_dimensions)
        ]

    def relayout(base: StorageView) -> Layout:
        stride: list[Expr] = [sympy.S.Zero] * len(size)
        for k, d in enumerate(broadcast_dimensions):
            stride[d] = sympy.S.Zero if own[k] == 1 and size[d] != 1 else base.layout.stride[k]
        return Layout(base.dtype, size, tuple(stride), base.layout.offset)

    return _view(a, size, to_input, relayout)


@lowers("prims::permute")
def permute(ctx: LoweringContext, a: TensorValue, dims: Sequence[int]) -> TensorValue:
    ndim = len(a.size)
    dims = [d % ndim for d in dims]
    size = tuple(a.size[d] for d in dims)

    def to_input(index: body.Index) -> list[Expr]:
        result: list[Expr] = [sympy.S.Zero] * ndim
        for j, d in enumerate(dims):
            result[d] = index[j]
        return result

    def relayout(base: StorageView) -> Layout:
        stride = tuple(base.layout.stride[d] for d in dims)
        return Layout(base.dtype, size, stride, base.layout.offset)

    return _view(a, size, to_input, relayout)


@lowers("prims::squeeze")
def squeeze(ctx: LoweringContext, a: TensorValue, dims: Sequence[int]) -> TensorValue:
    ndim = len(a.size)
    drop = {d % ndim for d in dims if a.size[d % ndim] == 1}
    keep = [d for d in range(ndim) if d not in drop]
    size = tuple(a.size[d] for d in keep)

    def to_input(index: body.Index) -> list[Expr]:
        result: list[Expr] = [sympy.S.Zero] * ndim
        for j, d in enumerate(keep):
            result[d] = index[j]
        return result

    def relayout(base: StorageView) -> Layout:
        stride = tuple(base.layout.stride[d] for d in keep)
        return Layout(base.dtype, size, stride, base.layout.offset)

    return _view(a, size, to_input, relayout)


@lowers("prims::unsqueeze")
def unsqueeze(ctx: LoweringContext, a: TensorValue, dim: int) -> TensorValue:
    ndim = len(a.size) + 1
    dim = dim % ndim
    size = (*a.size[:dim], sympy.S.One, *a.size[dim:])

    def to_input(index: body.Index) -> list[Expr]:
        return [*index[:dim], *index[dim + 1 :]]

    def relayout(base: StorageView) -> Layout:
        stride = list(base.layout.stride)
        stride.insert(dim, sympy.S.One)
        return Layout(base.dtype, size, tuple(stride), base.layout.offset)

    return _view(a, size, to_input, relayout)


@lowers("prims::slice")
def slice_(
    ctx: LoweringContext,
    a: TensorValue,
    start_indices: Sequence[Any],
    limit_indices: Sequence[Any],
    strides: Sequence[int] | None = None,
) -> TensorValue:
    steps = [as_expr(s) for s in (strides or [1] * len(a.size))]
    starts = [as_expr(s) for s in start_indices]
    size = tuple(as_expr(s) for s in ctx.output_spec().shape)

    def to_input(index: body.Index) -> list[Expr]:
        return [start + i * step for start, i, step in zip(starts, index, steps)]

    def relayout(base: StorageView) -> Layout:
        offset = base.layout.offset + flat_index(starts, base.layout.stride)
        stride = tuple(s * step for s, step in zip(base.layout.stride, steps))
        return Layout(base.dtype, size, stride, offset)

    return _view(a, size, to_input, relayout)


@lowers("prims::flip")
def flip(ctx: LoweringContext, a: TensorValue, dims: Sequence[int]) -> TensorValue:
    ndim = len(a.size)
    flipped = {d % ndim for d in dims}
    size = a.size

    def to_input(index: body.Index) -> list[Expr]:
        return [size[d] - 1 - i if d in flipped else i for d, i in enumerate(index)]

    # torch has no negative strides: a flipped view is an index function, never a layout
    return _view(a, size, to_input, _no_layout)


def _reshape(ctx: LoweringContext, a: TensorValue, is_view: bool) -> TensorValue:
    spec = ctx.output_spec()
    size = tuple(as_expr(s) for s in spec.shape)
    own = a.size

    def to_input(index: body.Index) -> list[Expr]:
        return unflatten(flat_index(index, contiguous_strides(size)), own)

    def relayout(base: StorageView) -> Layout | None:
        dense = all(
            n == 1 or s == c for s, c, n in zip(base.layout.stride, contiguous_strides(own), own)
        )
        if dense:
            return Layout(base.dtype, size, contiguous_strides(size), base.layout.offset)
        if is_view and base is a:  # the spec's offset is absolute; ours counts from the base
            assert ctx.node is not None
            shift = as_expr(spec.storage_offset) - storage_offset(ctx, ctx.node.args[0])
            return Layout(base.dtype, size, spec_layout(spec).stride, base.layout.offset + shift)
        return None

    return _view(a, size, to_input, relayout)


@lowers("prims::view")
def view(ctx: LoweringContext, a: TensorValue, shape: Sequence[Any]) -> TensorValue:
    return _reshape(ctx, a, is_view=True)


@lowers("prims::reshape")
def reshape(ctx: LoweringContext, a: TensorValue, shape: Sequence[Any]) -> TensorValue:
    return _reshape(ctx, a, is_view=False)


@lowers("prims::as_strided")
def as_strided(
    ctx: LoweringContext, a: TensorValue, shape: Sequence[Any], strides: Sequence[Any], offset: Any
) -> TensorValue:
    spec = ctx.output_spec()
    assert ctx.node is not None
    argument = ctx.node.args[0]
    traced = ctx.spec_layout(argument.name) if isinstance(argument, Ref) else None
    if isinstance(a, StorageView):
        # prims::as_strided's offset counts from a's first element (aten's absolute offset
        # minus a's, in its decomposition), which sits at a.layout.offset in our storage
        base = a
        if ctx.program.storages[a.storage].layout is None:  # memory around a view it was given
            ctx.program.unbounded.add(a.storage)
    elif traced is not None and traced.is_contiguous():
        # windows of a value not computed yet (pooling over a padded input): an index function
        # over its row-major elements; realizing it first would materialize the whole padded
        # input (EfficientNet's 1280-wide average pool: a 250 GiB buffer)
        size = tuple(as_expr(s) for s in shape)
        steps = [as_expr(s) for s in strides]
        load, own = a.loader(), a.size

        def to_input(index: body.Index) -> list[Expr]:
            return unflatten(flat_index(index, steps, as_expr(offset)), own)

        return view_of(a, size, lambda index: load(to_input(index)))
    else:
        base = ctx.realize(a, traced)
    layout = Layout(
        spec.dtype,
        tuple(as_expr(s) for s in shape),
        tuple(as_expr(s) for s in strides),
        base.layout.offset + as_expr(offset),
    )
    return StorageView(base.storage, layout)
