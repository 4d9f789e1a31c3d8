"""Kernels of the view and data-movement prims, the creation prims and the indexing prims.

View prims return NumPy views (so `copy_to` into a view writes the viewed array, as in
torch); the others return new C-contiguous arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ember_numpy_backend.kernels import kernel

Array = Any  # numpy.ndarray


# ---- creation ---------------------------------------------------------------------------


@kernel("full")
def _full(shape: list[int], value: Any, *, dtype: np.dtype[Any], device: Any) -> Array:
    return np.full(shape, value, dtype=dtype)


@kernel("iota")
def _iota(length: int, start: Any, step: Any, *, dtype: np.dtype[Any], device: Any) -> Array:
    exact = np.float64 if isinstance(start, float) or isinstance(step, float) else np.int64
    return (start + np.arange(length, dtype=exact) * step).astype(dtype)


# ---- views ------------------------------------------------------------------------------


@kernel("broadcast_in_dim")
def _broadcast_in_dim(a: Array, shape: list[int], broadcast_dimensions: list[int]) -> Array:
    expanded = [1] * len(shape)
    for operand_dim, result_dim in enumerate(broadcast_dimensions):
        expanded[result_dim] = a.shape[operand_dim]
    return np.broadcast_to(a.reshape(expanded), shape)


@kernel("view")
def _view(a: Array, shape: list[int]) -> Array:
    return a.reshape(shape)


@kernel("reshape")
def _reshape(a: Array, shape: list[int]) -> Array:
    return np.ascontiguousarray(a).reshape(shape).copy()


@kernel("permute")
def _permute(a: Array, dims: list[int]) -> Array:
    return np.transpose(a, dims)


@kernel("slice")
def _slice(
    a: Array, start_indices: list[int], limit_indices: list[int], strides: list[int] | None = None
) -> Array:
    steps = strides or [1] * a.ndim
    return a[tuple(slice(s, e, t) for s, e, t in zip(start_indices, limit_indices, steps))]


@kernel("squeeze")
def _squeeze(a: Array, dims: list[int]) -> Array:
    return np.squeeze(a, axis=tuple(dims)) if dims else a


@kernel("unsqueeze")
def _unsqueeze(a: Array, dim: int) -> Array:
    return np.expand_dims(a, dim)


@kernel("as_strided")
def _as_strided(a: Array, shape: list[int], strides: list[int], offset: int) -> Array:
    item = a.itemsize
    # a view starting `offset` elements past a's first element, then the requested strides
    start = as_strided(a, shape=[offset + 1], strides=[item])[offset:]
    return as_strided(start, shape=shape, strides=[s * item for s in strides])


@kernel("flip")
def _flip(a: Array, dims: list[int]) -> Array:
    return np.flip(a, axis=tuple(dims)).copy() if dims else a.copy()


@kernel("pad")
def _pad(a: Array, value: Any, low: list[int], high: list[int], interior: list[int]) -> Array:
    result = a
    for dim in range(a.ndim):
        if interior[dim] and result.shape[dim] > 1:
            size = result.shape[dim]
            spread = list(result.shape)
            spread[dim] = size + (size - 1) * interior[dim]
            filled = np.full(spread, value, dtype=a.dtype)
            index = [slice(None)] * a.ndim
            index[dim] = slice(None, None, interior[dim] + 1)
            filled[tuple(index)] = result
            result = filled
        before, after = low[dim], high[dim]
        crop = [slice(None)] * a.ndim
        crop[dim] = slice(max(-before, 0), result.shape[dim] - max(-after, 0))
        result = result[tuple(crop)]
        widths = [(0, 0)] * a.ndim
        widths[dim] = (max(before, 0), max(after, 0))
        result = np.pad(result, widths, constant_values=value)
    return np.ascontiguousarray(result)


@kernel("cat")
def _cat(tensors: list[Array], dim: int) -> Array:
    return np.concatenate(tensors, axis=dim)


@kernel("clone")
def _clone(a: Array) -> Array:
    return np.array(a, copy=True, order="C")


@kernel("copy_to")
def _copy_to(dst: Array, src: Array) -> Array:
    np.copyto(dst, src)
    return dst


# ---- indexing ---------------------------------------------------------------------------


def _positions(a: Array, dim: int, index: Array) -> tuple[Array, ...]:
    """Full index tuples: every position of `index`, with dim replaced by index's values."""
    grid = list(np.indices(index.shape, sparse=True))
    grid[dim] = index
    return tuple(grid)


@kernel("gather")
def _gather(a: Array, dim: int, index: Array) -> Array:
    return np.ascontiguousarray(a[_positions(a, dim, index)])


@kernel("scatter")
def _scatter(a: Array, dim: int, index: Array, src: Array) -> Array:
    out = a.copy()
    out[_positions(a, dim, index)] = src
    return out


@kernel("scatter_add")
def _scatter_add(a: Array, dim: int, index: Array, src: Array) -> Array:
    out = a.copy()
    np.add.at(out, _positions(a, dim, index), src)
    return out


_REDUCERS = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


@kernel("scatter_reduce")
def _scatter_reduce(a: Array, dim: int, index: Array, src: Array, reduce: str) -> Array:
    out = a.copy()
    _REDUCERS[reduce].at(out, _positions(a, dim, index), src)
    return out
