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


def _running(a: torch.Tensor, dim: int, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """cummax/cummin: each position against every earlier one (quadratic, static shapes)."""
    if a.dim() == 0:
        return aten.clone.default(a), aten.zeros.default([], dtype=torch.int64, device=a.device)
    d = dim % a.dim()
    n = a.shape[d]
    moved = aten.movedim.int(a, d, -1)  # [..., n]
    later = aten.unsqueeze.default(moved, -2)  # [..., 1, n]: element j
    places = aten.arange.default(n, device=a.device)
    earlier = aten.le.Tensor(
        aten.unsqueeze.default(places, 0), aten.unsqueeze.default(places, 1)
    )  # [i, j]: j <= i
    fill = float("-inf") if largest else float("inf")
    if not a.dtype.is_floating_point:
        info = torch.iinfo(a.dtype) if a.dtype != torch.bool else None
        fill = (info.min if largest else info.max) if info else (not largest)
    candidates = aten.where.self(earlier, later, aten.full_like.default(later, fill))
    values = (aten.amax.default if largest else aten.amin.default)(candidates, [-1])
    # the index: the last j <= i holding the running value (NaN: the last NaN so far)
    hit = aten.eq.Tensor(later, aten.unsqueeze.default(values, -1))
    if a.dtype.is_floating_point:
        both_nan = aten.logical_and.default(
            aten.isnan.default(later), aten.isnan.default(aten.unsqueeze.default(values, -1))
        )
        hit = aten.logical_or.default(hit, both_nan)
    hit = aten.logical_and.default(hit, earlier)
    position = aten.where.self(hit, places, aten.full_like.default(places, -1))
    indices = aten.amax.default(position, [-1])
    return aten.movedim.int(values, -1, d), aten.movedim.int(indices, -1, d)


to_prims("aten::cummax.default")(lambda a, dim: _running(a, dim, True))
to_prims("aten::cummin.default")(lambda a, dim: _running(a, dim, False))


@to_prims("aten::kthvalue.default")
def _kthvalue(
    a: torch.Tensor, k: int, dim: int = -1, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    if a.dim() == 0:
        return aten.clone.default(a), aten.zeros.default([], dtype=torch.int64, device=a.device)
    values, indices = aten.sort.default(a, dim)
    value = aten.select.int(values, dim, k - 1)
    index = aten.select.int(indices, dim, k - 1)
    if keepdim:
        value, index = aten.unsqueeze.default(value, dim), aten.unsqueeze.default(index, dim)
    return value, index


@to_prims("aten::mode.default")
def _mode(
    a: torch.Tensor, dim: int = -1, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The most frequent value (the smallest among ties) and the last index holding it."""
    if a.dim() == 0:
        return aten.clone.default(a), aten.zeros.default([], dtype=torch.int64, device=a.device)
    d = dim % a.dim()
    moved = aten.movedim.int(a, d, -1)  # [..., n]
    n = moved.shape[-1]
    same = aten.eq.Tensor(aten.unsqueeze.default(moved, -1), aten.unsqueeze.default(moved, -2))
    counts = aten.sum.dim_IntList(same, [-1])  # [..., n]: how often each element occurs
    best = aten.amax.default(counts, [-1], True)
    fill = float("inf") if a.dtype.is_floating_point else torch.iinfo(a.dtype).max
    candidates = aten.where.self(
        aten.eq.Tensor(counts, best), moved, aten.full_like.default(moved, fill)
    )
    value = aten.amin.default(candidates, [-1], True)
    places = aten.arange.default(n, device=a.device)
    position = aten.where.self(
        aten.eq.Tensor(moved, value), places, aten.full_like.default(places, -1)
    )
    index = aten.amax.default(position, [-1], True)
    value, index = aten.movedim.int(value, -1, d), aten.movedim.int(index, -1, d)
    if not keepdim:
        value, index = aten.squeeze.dim(value, d), aten.squeeze.dim(index, d)
    return value, index
