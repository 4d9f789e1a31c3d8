"""Memory-layout predicates over symbolic sizes and strides, as sympy booleans.

These answer what c10 asks a node for when a tensor's sizes are symbolic: contiguity in a
dimension order (row-major, channels-last), channels-last strides, and density in a given
order. They follow c10's definitions (c10/core/Contiguity.h, c10/core/MemoryFormat.h).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy

Exprs = Sequence[sympy.Expr]

CHANNELS_LAST_2D = (1, 3, 2, 0)
CHANNELS_LAST_3D = (1, 4, 3, 2, 0)


def contiguous_in_order(sizes: Exprs, strides: Exprs, order: Sequence[int]) -> sympy.Basic:
    """Dense with dimension `order[0]` innermost, or empty; size-1 dimensions take any stride."""
    if len(order) != len(sizes):
        return sympy.false
    dense: sympy.Basic = sympy.true
    expected: sympy.Expr = sympy.S.One
    for dim in order:
        dense = sympy.And(
            dense, sympy.Or(sympy.Eq(sizes[dim], 1), sympy.Eq(strides[dim], expected))
        )
        expected = expected * sizes[dim]
    empty = sympy.Or(*(sympy.Eq(size, 0) for size in sizes))
    return sympy.Or(dense, empty)


def is_contiguous(sizes: Exprs, strides: Exprs) -> sympy.Basic:
    return contiguous_in_order(sizes, strides, range(len(sizes) - 1, -1, -1))


def is_channels_last_contiguous_2d(sizes: Exprs, strides: Exprs) -> sympy.Basic:
    return contiguous_in_order(sizes, strides, CHANNELS_LAST_2D)


def is_channels_last_contiguous_3d(sizes: Exprs, strides: Exprs) -> sympy.Basic:
    return contiguous_in_order(sizes, strides, CHANNELS_LAST_3D)


def channels_last_strides(sizes: Exprs, strides: Exprs, order: Sequence[int]) -> sympy.Basic:
    """c10's guess that strides describe a channels-last layout (ambiguous cases say no)."""
    if len(order) != len(sizes):
        return sympy.false
    conditions: list[sympy.Basic] = [sympy.Ne(strides[1], 0)]  # a trivial C dim means NCHW
    minimum: sympy.Expr = sympy.S.Zero
    for dim in order:
        conditions.append(sympy.Ne(sizes[dim], 0))
        conditions.append(sympy.Ge(strides[dim], minimum))
        if dim == 0:
            # N111 with equal strides is ambiguous; c10 falls back to contiguous.
            conditions.append(sympy.Ne(minimum, strides[1]))
        minimum = strides[dim] * sympy.Max(sizes[dim], 1)
    return sympy.And(*conditions)


def is_channels_last_strides_2d(sizes: Exprs, strides: Exprs) -> sympy.Basic:
    return channels_last_strides(sizes, strides, CHANNELS_LAST_2D)


def is_channels_last_strides_3d(sizes: Exprs, strides: Exprs) -> sympy.Basic:
    return channels_last_strides(sizes, strides, CHANNELS_LAST_3D)


def dense_in_order(sizes: Exprs, strides: Exprs, order: Sequence[int]) -> sympy.Basic:
    """Non-overlapping and dense when walking dimensions in `order` (innermost first).

    `order` puts dimensions of size < 2 last, as c10's sort does; such a dimension ends the
    walk, since everything after it is size 0 or 1 too.
    """
    result: sympy.Basic = sympy.false
    prefix: sympy.Basic = sympy.true
    expected: sympy.Expr = sympy.S.One
    for dim in order:
        small = sympy.Lt(sizes[dim], 2)
        result = sympy.Or(result, sympy.And(prefix, small))
        prefix = sympy.And(prefix, sympy.Not(small), sympy.Eq(strides[dim], expected))
        expected = expected * sizes[dim]
    return sympy.Or(result, prefix)


def view_strides(
    sizes: Exprs,
    strides: Exprs,
    shape: Exprs,
    decide: Callable[[sympy.Basic], bool | None],
) -> list[sympy.Expr] | None:
    """The strides of a view in `shape` of a tensor with `sizes` and `strides`, as c10's
    `computeStride` finds them (chunks of dimensions contiguous with each other, each split
    or merged into the view's dimensions), or None where no view exists. Every comparison is
    settled by `decide` (True, False, or None: not decided for all sizes); an undecided one
    also gives None, so the caller copies rather than narrow a Graph with a new guard."""

    def holds(condition: sympy.Basic) -> bool:
        if condition in (sympy.true, sympy.false):
            return bool(condition)
        answer = decide(condition)
        if answer is None:
            raise _Undecided
        return answer

    if not sizes or any(sympy.sympify(n) == 0 for n in (*sizes, *shape)):
        return None  # c10's rules for empty tensors differ; a copy is right at every size
    new: list[sympy.Expr] = [sympy.S.Zero] * len(shape)
    try:
        view_dim = len(shape) - 1
        base: sympy.Expr = sympy.sympify(strides[-1])
        tensor_numel: sympy.Expr = sympy.S.One
        view_numel: sympy.Expr = sympy.S.One
        for dim in range(len(sizes) - 1, -1, -1):
            tensor_numel = tensor_numel * sizes[dim]
            ends_chunk = dim == 0 or (
                not holds(sympy.Eq(sizes[dim - 1], 1))
                and not holds(sympy.Eq(strides[dim - 1], tensor_numel * base))
            )
            if not ends_chunk:
                continue
            while view_dim >= 0 and (
                holds(sympy.Lt(view_numel, tensor_numel)) or holds(sympy.Eq(shape[view_dim], 1))
            ):
                new[view_dim] = sympy.expand(view_numel * base)
                view_numel = view_numel * shape[view_dim]
                view_dim -= 1
            if not holds(sympy.Eq(view_numel, tensor_numel)):
                return None
            if dim > 0:
                base = sympy.sympify(strides[dim - 1])
                tensor_numel = view_numel = sympy.S.One
    except _Undecided:
        return None
    return new if view_dim == -1 else None


class _Undecided(Exception):
    """A comparison `view_strides` needs holds for some sizes and not for others."""
