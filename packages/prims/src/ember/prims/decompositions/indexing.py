"""ATen indexing ops written with gather/scatter prims: advanced indexing (index, index_put),
index_select, gather, scatter (and add/reduce), embedding and its backward, take, masked ops
that keep shapes, triu/tril.

Advanced indices are broadcast together, wrapped (negative counts from the end) and turned
into one linear index into the flattened indexed dims, so every form becomes a 1-D gather or
scatter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.elementwise import inplace
from ember.prims.decompositions.operands import (
    broadcast_shapes,
    canonical_dim,
    convert,
    expand_to,
    scalar_like,
)
from ember.prims.decompositions.table import to_prims
from ember.prims.decompositions.views import view
from ember.prims.primitives import prims


def wrap_index(index: torch.Tensor, size: int) -> torch.Tensor:
    """int64 index with negative entries counted from the end."""
    index = convert(index, torch.int64)
    negative = prims.lt(index, scalar_like(0, index))
    return prims.where(negative, prims.add(index, scalar_like(size, index)), index)


def _linear_index(
    a: torch.Tensor, indices: Sequence[torch.Tensor | None]
) -> tuple[torch.Tensor, torch.Tensor, list[int], list[int], int]:
    """(flattened a with indexed dims first, linear index, result shape, permuted dims)."""
    indices = list(indices) + [None] * (a.dim() - len(indices))
    expanded: list[torch.Tensor | None] = []
    for index in indices:
        if index is not None and index.dtype in (torch.bool, torch.uint8):
            raise NotImplementedError("boolean mask indexing depends on values; not traceable")
        expanded.append(index)
    indexed = [d for d, i in enumerate(expanded) if i is not None]
    rest = [d for d in range(a.dim()) if d not in indexed]
    shape = broadcast_shapes(*(expanded[d].shape for d in indexed))  # type: ignore[union-attr]
    linear: torch.Tensor | None = None
    for d in indexed:
        index = wrap_index(expand_to(expanded[d], shape, torch.int64, a.device), a.shape[d])
        linear = (
            index
            if linear is None
            else prims.add(prims.mul(linear, scalar_like(a.shape[d], linear)), index)
        )
    if linear is None:
        raise IndexError("index needs at least one index tensor")
    contiguous = indexed == list(range(indexed[0], indexed[-1] + 1))
    # torch puts the broadcast index dims where the indexed dims were if they are adjacent,
    # first otherwise
    insert_at = indexed[0] if contiguous else 0
    order = indexed + rest
    moved = prims.permute(a, order) if order != list(range(a.dim())) else a
    flat_shape = [math.prod(a.shape[d] for d in indexed)] + [a.shape[d] for d in rest]
    flat = prims.reshape(moved, flat_shape)
    return flat, linear, shape, rest, insert_at


def _gather_rows(flat: torch.Tensor, linear: torch.Tensor) -> torch.Tensor:
    """flat[linear] for a linear index of any shape, rows of flat being dim 0."""
    count = linear.numel()
    rows = prims.reshape(linear, [count])
    tail = list(flat.shape[1:])
    index = prims.broadcast_in_dim(rows, [count, *tail], [0])
    return prims.gather(flat, 0, index)


@to_prims("aten::index.Tensor")
def index(a: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> torch.Tensor:
    flat, linear, shape, rest, insert_at = _linear_index(a, indices)
    gathered = _gather_rows(flat, linear)
    rest_shape = [a.shape[d] for d in rest]
    result = prims.reshape(gathered, [*shape, *rest_shape])
    if insert_at:
        n = len(shape)
        order = (
            list(range(n, n + insert_at))
            + list(range(n))
            + list(range(n + insert_at, n + len(rest_shape)))
        )
        result = prims.permute(result, order)
    return prims.clone(result) if insert_at else result


def _index_put(
    a: torch.Tensor,
    indices: Sequence[torch.Tensor | None],
    values: torch.Tensor,
    accumulate: bool = False,
) -> torch.Tensor:
    masked = _masked_put(a, indices, values, accumulate)
    if masked is not None:
        return masked
    flat, linear, shape, rest, insert_at = _linear_index(a, indices)
    rest_shape = [a.shape[d] for d in rest]
    target_shape = [*shape, *rest_shape]
    if insert_at:
        n = len(shape)
        natural = (
            list(range(n, n + insert_at))
            + list(range(n))
            + list(range(n + insert_at, n + len(rest_shape)))
        )
        permuted_shape = [target_shape[i] for i in natural]
        values = expand_to(convert(values, a.dtype), permuted_shape, a.dtype, a.device)
        inverse = [natural.index(i) for i in range(len(natural))]
        values = prims.permute(values, inverse)
    else:
        values = expand_to(convert(values, a.dtype), target_shape, a.dtype, a.device)
    count = linear.numel()
    rows = prims.reshape(linear, [count])
    source = prims.reshape(values, [count, *flat.shape[1:]])
    index_rows = prims.broadcast_in_dim(rows, [count, *flat.shape[1:]], [0])
    if accumulate:
        updated = prims.scatter_add(flat, 0, index_rows, source)
    else:
        updated = prims.scatter(flat, 0, index_rows, source)
    indexed = [d for d in range(a.dim()) if d not in rest]
    order = indexed + rest
    moved_shape = [a.shape[d] for d in order]
    unflat = prims.reshape(updated, moved_shape)
    inverse = [order.index(d) for d in range(a.dim())]
    result = prims.permute(unflat, inverse) if order != list(range(a.dim())) else unflat
    return prims.clone(result) if order != list(range(a.dim())) else result


def _masked_put(
    a: torch.Tensor,
    indices: Sequence[torch.Tensor | None],
    values: torch.Tensor,
    accumulate: bool,
) -> torch.Tensor | None:
    """a[mask] = values where values do not depend on how many elements the mask selects
    (they broadcast over the unmasked dims): a `where`, static in shape. None otherwise."""
    if len(indices) != 1 or indices[0] is None or indices[0].dtype != torch.bool:
        return None
    mask = indices[0]
    rest = list(a.shape[mask.dim() :])
    if list(mask.shape) != list(a.shape[: mask.dim()]):
        return None
    leading = list(values.shape[: max(values.dim() - len(rest), 0)])
    if any(size != 1 for size in leading):
        return None  # one value per selected element: how many is data-dependent
    values = convert(values, a.dtype)
    if leading:
        values = prims.reshape(values, list(values.shape[len(leading) :]))
    spread = expand_to(values, list(a.shape), a.dtype, a.device)
    selected = prims.broadcast_in_dim(mask, list(a.shape), list(range(mask.dim())))
    if accumulate:
        return prims.where(selected, prims.add(a, spread), a)
    return prims.where(selected, spread, a)


to_prims("aten::index_put.default", "aten::_unsafe_index_put.default")(_index_put)


@to_prims("aten::index_put_.default", "aten::_index_put_impl_.default")
def _index_put_(
    a: torch.Tensor,
    indices: Sequence[torch.Tensor | None],
    values: torch.Tensor,
    accumulate: bool = False,
    unsafe: bool = False,
) -> torch.Tensor:
    return prims.copy_to(a, _index_put(a, indices, values, accumulate))


@to_prims("aten::_unsafe_index.Tensor")
def _unsafe_index(a: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> torch.Tensor:
    return index(a, indices)


@to_prims("aten::index_select.default")
def index_select(a: torch.Tensor, dim: int, index_: torch.Tensor) -> torch.Tensor:
    if a.dim() == 0:
        return prims.clone(a)
    d = canonical_dim(dim, a.dim())
    rows = wrap_index(view(index_, [index_.numel()]) if index_.dim() != 1 else index_, a.shape[d])
    shape = list(a.shape)
    shape[d] = rows.shape[0]
    return prims.gather(a, d, prims.broadcast_in_dim(rows, shape, [d]))


@to_prims("aten::gather.default")
def _gather(
    a: torch.Tensor, dim: int, index_: torch.Tensor, *, sparse_grad: bool = False
) -> torch.Tensor:
    if a.dim() == 0:
        return prims.clone(a) if index_.dim() == 0 else prims.view(a, list(index_.shape))
    d = canonical_dim(dim, a.dim())
    return prims.gather(a, d, wrap_index(index_, a.shape[d]))


def _scatter_value(a: torch.Tensor, index_: torch.Tensor, src: Any) -> torch.Tensor:
    if isinstance(src, torch.Tensor):
        src = convert(src, a.dtype)
        if list(src.shape) != list(index_.shape):
            src = prims.slice(src, [0] * src.dim(), list(index_.shape))
        return src
    return prims.full(list(index_.shape), src, dtype=a.dtype, device=a.device)


@to_prims("aten::scatter.src", "aten::scatter.value")
def _scatter(a: torch.Tensor, dim: int, index_: torch.Tensor, src: Any) -> torch.Tensor:
    if a.dim() == 0:
        return prims.clone(_scatter_value(a, index_, src)) if index_.numel() else prims.clone(a)
    d = canonical_dim(dim, a.dim())
    return prims.scatter(a, d, wrap_index(index_, a.shape[d]), _scatter_value(a, index_, src))


@to_prims("aten::scatter.reduce", "aten::scatter.value_reduce")
def _scatter_with_reduce(
    a: torch.Tensor, dim: int, index_: torch.Tensor, src: Any, *, reduce: str
) -> torch.Tensor:
    if reduce not in ("add", "multiply"):
        raise ValueError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
    value = _scatter_value(a, index_, src)
    if a.dim() == 0:
        if not index_.numel():
            return prims.clone(a)
        value = prims.reshape(value, []) if value.dim() else value
        return prims.add(a, value) if reduce == "add" else prims.mul(a, value)
    d = canonical_dim(dim, a.dim())
    wrapped = wrap_index(index_, a.shape[d])
    if reduce == "add":
        return prims.scatter_add(a, d, wrapped, value)
    return prims.scatter_reduce(a, d, wrapped, value, "prod")


@to_prims("aten::scatter_add.default")
def _scatter_add(
    a: torch.Tensor, dim: int, index_: torch.Tensor, src: torch.Tensor
) -> torch.Tensor:
    if a.dim() == 0:
        return prims.add(a, convert(src, a.dtype)) if index_.numel() else prims.clone(a)
    d = canonical_dim(dim, a.dim())
    return prims.scatter_add(a, d, wrap_index(index_, a.shape[d]), _scatter_value(a, index_, src))


@to_prims("aten::scatter_reduce.two")
def _scatter_reduce(
    a: torch.Tensor,
    dim: int,
    index_: torch.Tensor,
    src: torch.Tensor,
    reduce: str,
    *,
    include_self: bool = True,
) -> torch.Tensor:
    d = canonical_dim(dim, a.dim())
    wrapped = wrap_index(index_, a.shape[d]) if a.dim() else index_
    value = _scatter_value(a, index_, src)
    if reduce in ("sum", "mean"):
        base = a if include_self else prims.scatter(a, d, wrapped, scalar_like(0, value))
        total = prims.scatter_add(base, d, wrapped, value)
        if reduce == "sum":
            return total
        ones = scalar_like(1, value)
        start = scalar_like(1 if include_self else 0, a)
        counts = prims.scatter_add(start, d, wrapped, ones)
        counts = prims.maximum(counts, scalar_like(1, counts))
        return prims.div(total, counts)  # integers: truncating division, as torch does
    name = {"prod": "prod", "amax": "amax", "amin": "amin"}[reduce]
    if not include_self:
        identity = {"prod": 1, "amax": -math.inf, "amin": math.inf}[reduce]
        if not a.dtype.is_floating_point and reduce != "prod":
            info = torch.iinfo(a.dtype)
            identity = info.min if reduce == "amax" else info.max
        filled = prims.scatter(a, d, wrapped, scalar_like(identity, value))
        return prims.scatter_reduce(filled, d, wrapped, value, name)
    return prims.scatter_reduce(a, d, wrapped, value, name)


@to_prims("aten::index_add.default")
def _index_add(
    a: torch.Tensor, dim: int, index_: torch.Tensor, source: torch.Tensor, *, alpha: Any = 1
) -> torch.Tensor:
    if a.dim() == 0:
        return prims.add(a, prims.mul(convert(source, a.dtype), scalar_like(alpha, a)))
    d = canonical_dim(dim, a.dim())
    rows = wrap_index(view(index_, [index_.numel()]), a.shape[d])
    src = convert(source, a.dtype)
    if alpha != 1:
        src = prims.mul(src, scalar_like(alpha, src))
    if src.dim() == 0:
        src = view(src, [1])
    return prims.scatter_add(a, d, prims.broadcast_in_dim(rows, list(src.shape), [d]), src)


@to_prims("aten::index_copy.default")
def _index_copy(
    a: torch.Tensor, dim: int, index_: torch.Tensor, source: torch.Tensor
) -> torch.Tensor:
    if a.dim() == 0:
        return prims.clone(convert(source, a.dtype))
    d = canonical_dim(dim, a.dim())
    rows = wrap_index(view(index_, [index_.numel()]), a.shape[d])
    src = convert(source, a.dtype)
    return prims.scatter(a, d, prims.broadcast_in_dim(rows, list(src.shape), [d]), src)


@to_prims("aten::index_fill.int_Scalar", "aten::index_fill.int_Tensor")
def _index_fill(a: torch.Tensor, dim: int, index_: torch.Tensor, value: Any) -> torch.Tensor:
    if a.dim() == 0:
        return expand_to(value, [], a.dtype, a.device)
    d = canonical_dim(dim, a.dim())
    rows = wrap_index(view(index_, [index_.numel()]), a.shape[d])
    shape = list(a.shape)
    shape[d] = rows.shape[0]
    src = expand_to(value, shape, a.dtype, a.device)
    return prims.scatter(a, d, prims.broadcast_in_dim(rows, shape, [d]), src)


@to_prims("aten::take.default")
def _take(a: torch.Tensor, index_: torch.Tensor) -> torch.Tensor:
    flat = prims.reshape(a, [a.numel()])
    rows = wrap_index(prims.reshape(index_, [index_.numel()]), a.numel())
    return prims.reshape(prims.gather(flat, 0, rows), list(index_.shape))


@to_prims("aten::take_along_dim.default")
def _take_along_dim(a: torch.Tensor, indices: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    if dim is None:
        return _take(a, indices)
    d = canonical_dim(dim, a.dim())
    shape = broadcast_shapes(
        (*a.shape[:d], 1, *a.shape[d + 1 :]), (*indices.shape[:d], 1, *indices.shape[d + 1 :])
    )
    a_shape, i_shape = list(shape), list(shape)
    a_shape[d], i_shape[d] = a.shape[d], indices.shape[d]
    source = expand_to(a, a_shape, a.dtype, a.device)
    idx = expand_to(indices, i_shape, torch.int64, a.device)
    return prims.gather(source, d, wrap_index(idx, a.shape[d]))


@to_prims("aten::embedding.default")
def embedding(
    weight: torch.Tensor,
    indices: torch.Tensor,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> torch.Tensor:
    rows = prims.reshape(convert(indices, torch.int64), [indices.numel()])
    gathered = _gather_rows(weight, rows)
    return prims.reshape(gathered, [*indices.shape, weight.shape[1]])


@to_prims("aten::embedding_dense_backward.default")
def _embedding_backward(
    grad: torch.Tensor,
    indices: torch.Tensor,
    num_weights: int,
    padding_idx: int,
    scale_grad_by_freq: bool,
) -> torch.Tensor:
    count = indices.numel()
    rows = prims.reshape(convert(indices, torch.int64), [count])
    dim = grad.shape[-1]
    source = prims.reshape(grad, [count, dim])
    if padding_idx >= 0:
        keep = prims.ne(rows, scalar_like(padding_idx, rows))
        source = prims.where(
            prims.broadcast_in_dim(keep, [count, dim], [0]), source, scalar_like(0, source)
        )
    if scale_grad_by_freq:
        ones = prims.full([count], 1, dtype=grad.dtype, device=grad.device)
        zeros = prims.full([num_weights], 0, dtype=grad.dtype, device=grad.device)
        frequency = prims.gather(prims.scatter_add(zeros, 0, rows, ones), 0, rows)
        source = prims.div(source, prims.broadcast_in_dim(frequency, [count, dim], [0]))
    zeros = prims.full([num_weights, dim], 0, dtype=grad.dtype, device=grad.device)
    return prims.scatter_add(zeros, 0, prims.broadcast_in_dim(rows, [count, dim], [0]), source)


def _triangle(a: torch.Tensor, diagonal: int, upper: bool) -> torch.Tensor:
    rows, cols = a.shape[-2], a.shape[-1]
    row = prims.iota(rows, 0, 1, dtype=torch.int64, device=a.device)
    col = prims.iota(cols, 0, 1, dtype=torch.int64, device=a.device)
    r, c = (
        prims.broadcast_in_dim(row, [rows, cols], [0]),
        prims.broadcast_in_dim(col, [rows, cols], [1]),
    )
    offset = prims.sub(c, r)
    keep = (prims.ge if upper else prims.le)(offset, scalar_like(diagonal, offset))
    keep = prims.broadcast_in_dim(keep, list(a.shape), [a.dim() - 2, a.dim() - 1])
    return prims.where(keep, a, scalar_like(0, a))


def _triu(a: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    return _triangle(a, diagonal, True)


def _tril(a: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    return _triangle(a, diagonal, False)


to_prims("aten::triu.default")(_triu)
to_prims("aten::tril.default")(_tril)
# householder_product's backward zeroes a triangle of a tensor it made, in place
to_prims("aten::triu_.default")(inplace(_triu))
to_prims("aten::tril_.default")(inplace(_tril))


@to_prims("aten::masked_scatter.default")
def _masked_scatter(a: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    shape = broadcast_shapes(a.shape, mask.shape)
    pred, x = expand_to(mask, shape, torch.bool, a.device), expand_to(a, shape, a.dtype, a.device)
    flat_mask = prims.reshape(convert(pred, torch.int64), [pred.numel()])
    position = prims.sub(prims.cumsum(flat_mask, 0), scalar_like(1, flat_mask))
    position = prims.maximum(position, scalar_like(0, position))
    src = prims.reshape(convert(source, a.dtype), [source.numel()])
    picked = prims.gather(src, 0, position)
    return prims.where(pred, prims.reshape(picked, shape), x)


# ---- ops written with other ATen ops (expanded to prims by later rounds) ----------------

aten = torch.ops.aten


@to_prims("aten::index_reduce.default")
def _index_reduce(
    a: torch.Tensor,
    dim: int,
    index_: torch.Tensor,
    source: torch.Tensor,
    reduce: str,
    *,
    include_self: bool = True,
) -> torch.Tensor:
    """index_reduce is scatter_reduce with the index broadcast along every other dim."""
    if a.dim() == 0:  # one element: index [0] selects it
        flat = aten.reshape.default(a, [1])
        values = aten.reshape.default(source, [1])
        result = aten.scatter_reduce.two(
            flat, 0, aten.reshape.default(index_, [1]), values, reduce, include_self=include_self
        )
        return aten.reshape.default(result, [])
    d = canonical_dim(dim, a.dim())
    shape = [1] * source.dim()
    shape[d] = -1
    expanded = aten.expand.default(aten.reshape.default(index_, shape), list(source.shape))
    return aten.scatter_reduce.two(a, d, expanded, source, reduce, include_self=include_self)


@to_prims("aten::put.default")
def _put(
    a: torch.Tensor, index_: torch.Tensor, source: torch.Tensor, accumulate: bool = False
) -> torch.Tensor:
    flat = aten.reshape.default(a, [-1])
    positions = aten.reshape.default(index_, [-1])
    values = aten.reshape.default(source, [-1])
    written = aten.index_put.default(flat, [positions], values, accumulate)
    return aten.reshape.default(written, list(a.shape))


def _clamped(a: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
    # positions the mask hides may be out of range: clamp them to a valid one
    return [
        None if i is None else aten.clamp.default(i, -a.shape[d], a.shape[d] - 1)
        for d, i in enumerate(indices)
    ]


@to_prims("aten::_unsafe_masked_index.default")
def _unsafe_masked_index(
    a: torch.Tensor, mask: torch.Tensor, indices: Sequence[torch.Tensor | None], fill: Any
) -> torch.Tensor:
    picked = aten._unsafe_index.Tensor(a, _clamped(a, indices))
    return aten.where.self(mask, picked, aten.full_like.default(picked, fill))


@to_prims("aten::_unsafe_masked_index_put_accumulate.default")
def _unsafe_masked_index_put_accumulate(
    a: torch.Tensor,
    mask: torch.Tensor,
    indices: Sequence[torch.Tensor | None],
    values: torch.Tensor,
) -> torch.Tensor:
    hidden = aten.where.self(mask, values, aten.zeros_like.default(values))
    return aten._unsafe_index_put.default(a, _clamped(a, indices), hidden, True)


@to_prims("aten::nonzero_static.default")
def _nonzero_static(a: torch.Tensor, *, size: int, fill_value: int = -1) -> torch.Tensor:
    """The first `size` nonzero positions in row-major order, padded with fill_value rows."""
    flat = aten.reshape.default(aten.ne.Scalar(a, 0), [-1])
    rank = aten.sub.Scalar(aten.cumsum.default(flat, 0), 1)  # the output row of each position
    kept = aten.logical_and.default(flat, aten.lt.Scalar(rank, size))
    # positions not kept write into a spare row `size`, sliced off afterwards
    rows = aten.where.self(kept, rank, aten.full_like.default(rank, size))
    linear = aten.arange.default(flat.shape[0], device=a.device)
    slots = aten.full.default([size + 1], -1, dtype=torch.int64, device=a.device)
    found = aten.slice.Tensor(aten.scatter.src(slots, 0, rows, linear), 0, 0, size)
    columns = []
    stride = 1
    strides = []
    for extent in reversed(a.shape):
        strides.append(stride)
        stride *= extent
    for extent, step in zip(a.shape, reversed(strides)):
        coordinate = aten.remainder.Scalar(aten.floor_divide.Scalar(found, step), extent)
        columns.append(coordinate)
    missing = aten.eq.Scalar(found, -1)
    filled = [aten.where.self(missing, aten.full_like.default(c, fill_value), c) for c in columns]
    if not filled:
        return aten.zeros.default([size, 0], dtype=torch.int64, device=a.device)
    return aten.stack.default(filled, 1)
