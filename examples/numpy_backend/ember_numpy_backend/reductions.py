"""Kernels of the reduction, scan and sort prims."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_numpy_backend.kernels import kernel

Array = Any  # numpy.ndarray


@kernel("sum")
def _sum(a: Array, dims: list[int]) -> Array:
    if a.dtype == np.bool_:
        return np.any(a, axis=tuple(dims))
    return np.sum(a, axis=tuple(dims), dtype=a.dtype)


@kernel("prod")
def _prod(a: Array, dims: list[int]) -> Array:
    if a.dtype == np.bool_:
        return np.all(a, axis=tuple(dims))
    return np.prod(a, axis=tuple(dims), dtype=a.dtype)


@kernel("amax")
def _amax(a: Array, dims: list[int]) -> Array:
    return np.max(a, axis=tuple(dims))


@kernel("amin")
def _amin(a: Array, dims: list[int]) -> Array:
    return np.min(a, axis=tuple(dims))


@kernel("var")
def _var(a: Array, dims: list[int], correction: float) -> Array:
    count = int(np.prod([a.shape[d] for d in dims])) if dims else 1
    mean = np.mean(a, axis=tuple(dims), keepdims=True)
    squares = np.sum(np.square(np.abs(a - mean)), axis=tuple(dims))
    with np.errstate(divide="ignore", invalid="ignore"):
        return squares / max(count - correction, 0)


@kernel("argmax")
def _argmax(a: Array, dim: int) -> Array:
    return np.argmax(a, axis=dim).astype(np.int64)  # the first NaN counts as largest


@kernel("argmin")
def _argmin(a: Array, dim: int) -> Array:
    return np.argmin(a, axis=dim).astype(np.int64)


@kernel("cumsum")
def _cumsum(a: Array, dim: int) -> Array:
    return np.cumsum(a, axis=dim, dtype=a.dtype)


@kernel("cumprod")
def _cumprod(a: Array, dim: int) -> Array:
    return np.cumprod(a, axis=dim, dtype=a.dtype)


@kernel("sort")
def _sort(a: Array, dim: int, descending: bool) -> tuple[Array, Array]:
    if a.ndim == 0:
        return a.copy(), np.zeros((), dtype=np.int64)
    if not descending:
        indices = np.argsort(a, axis=dim, kind="stable")
    else:
        # a stable descending order: sort the reversed array ascending, reverse back
        size = a.shape[dim]
        reversed_indices = np.argsort(np.flip(a, axis=dim), axis=dim, kind="stable")
        indices = size - 1 - np.flip(reversed_indices, axis=dim)
    return np.take_along_axis(a, indices, axis=dim), indices.astype(np.int64)
