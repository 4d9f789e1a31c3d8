"""ATen searching and order-statistic ops written with comparisons, reductions and sort
(through other ATen ops, expanded to prims by later rounds): bucketize, searchsorted, isin,
histc, median and nanmedian.

Searches compare every element with every boundary (a broadcast comparison and a count):
quadratic in the sizes, but static in shape and free of data-dependent control flow.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten


def _count_before(
    boundaries: torch.Tensor, values: torch.Tensor, right: bool, out_int32: bool
) -> torch.Tensor:
    """For each value (…, k), how many of the sorted boundaries (…, m) lie before it."""
    expanded = aten.unsqueeze.default(values, -1)  # (…, k, 1)
    edges = aten.unsqueeze.default(boundaries, -2)  # (…, 1, m)
    before = aten.le.Tensor(edges, expanded) if right else aten.lt.Tensor(edges, expanded)
    dtype = torch.int32 if out_int32 else torch.int64
    return aten.sum.dim_IntList(before, [-1], dtype=dtype)


@to_prims("aten::bucketize.Tensor")
def _bucketize(
    a: torch.Tensor, boundaries: torch.Tensor, *, out_int32: bool = False, right: bool = False
) -> torch.Tensor:
    flat = aten.reshape.default(a, [-1])
    counts = _count_before(boundaries, flat, right, out_int32)
    return aten.reshape.default(counts, list(a.shape))


@to_prims("aten::searchsorted.Tensor")
def _searchsorted(
    sorted_sequence: torch.Tensor,
    a: torch.Tensor,
    *,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: torch.Tensor | None = None,
) -> torch.Tensor:
    if side is not None:
        right = side == "right"
    if sorter is not None:
        sorted_sequence = aten.gather.default(sorted_sequence, -1, sorter)
    if sorted_sequence.dim() == 1:
        return _bucketize(a, sorted_sequence, out_int32=out_int32, right=right)
    return _count_before(sorted_sequence, a, right, out_int32)


@to_prims("aten::isin.Tensor_Tensor")
def _isin(
    elements: torch.Tensor,
    test_elements: torch.Tensor,
    *,
    assume_unique: bool = False,
    invert: bool = False,
) -> torch.Tensor:
    flat = aten.reshape.default(elements, [-1, 1])
    tests = aten.reshape.default(test_elements, [1, -1])
    found = aten.any.dim(aten.eq.Tensor(flat, tests), 1)
    if invert:
        found = aten.logical_not.default(found)
    return aten.reshape.default(found, list(elements.shape))


@to_prims("aten::histc.default")
def _histc(a: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> torch.Tensor:
    # histc takes the data's range when min == max; reading it would be data-dependent, so
    # only explicit ranges decompose (the common use)
    if min == max:
        raise NotImplementedError("histc without an explicit range depends on the data")
    low, high = float(min), float(max)
    flat = aten.reshape.default(a, [-1])
    inside = aten.logical_and.default(aten.ge.Scalar(flat, low), aten.le.Scalar(flat, high))
    scaled = aten.mul.Scalar(aten.sub.Scalar(flat, low), bins / (high - low))
    index = aten.clamp.default(aten._to_copy.default(scaled, dtype=torch.int64), 0, bins - 1)
    index = aten.where.self(inside, index, aten.zeros_like.default(index))
    ones = aten._to_copy.default(inside, dtype=a.dtype)
    zeros = aten.zeros.default([bins], dtype=a.dtype, device=a.device)
    return aten.scatter_add.default(zeros, 0, index, ones)


def _median_along(
    values: torch.Tensor, dim: int, ignore_nan: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The lower median along dim and its index (sort puts NaN last)."""
    ordered, indices = aten.sort.default(values, dim)
    numbers = aten.logical_not.default(aten.isnan.default(values))
    count = aten.sum.dim_IntList(numbers, [dim], True)
    if ignore_nan:  # the middle of the numbers; all-NaN slices take position 0 (a NaN)
        position = aten.floor_divide.Scalar(aten.clamp_min.default(aten.sub.Scalar(count, 1), 0), 2)
    else:  # a slice holding NaN has median NaN: the first NaN, just past the numbers
        middle = aten.full_like.default(count, (values.shape[dim] - 1) // 2)
        position = aten.where.self(aten.eq.Scalar(count, values.shape[dim]), middle, count)
    return (
        aten.gather.default(ordered, dim, position),
        aten.gather.default(indices, dim, position),
    )


def _median_dim(
    a: torch.Tensor, dim: int, keepdim: bool, ignore_nan: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    if a.dim() == 0:
        return aten.clone.default(a), aten.zeros.default([], dtype=torch.int64, device=a.device)
    value, index = _median_along(a, dim, ignore_nan)
    if not keepdim:
        value, index = aten.squeeze.dim(value, dim), aten.squeeze.dim(index, dim)
    return value, index


@to_prims("aten::median.default")
def _median(a: torch.Tensor) -> torch.Tensor:
    value, _ = _median_along(aten.reshape.default(a, [-1]), 0, False)
    return aten.reshape.default(value, [])


@to_prims("aten::nanmedian.default")
def _nanmedian(a: torch.Tensor) -> torch.Tensor:
    value, _ = _median_along(aten.reshape.default(a, [-1]), 0, True)
    return aten.reshape.default(value, [])


@to_prims("aten::median.dim")
def _median_with_dim(
    a: torch.Tensor, dim: int, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    return _median_dim(a, dim, keepdim, False)


@to_prims("aten::nanmedian.dim")
def _nanmedian_with_dim(
    a: torch.Tensor, dim: int, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    return _median_dim(a, dim, keepdim, True)
