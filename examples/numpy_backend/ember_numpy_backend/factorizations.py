"""Kernels of the matrix factorization prims, on `numpy.linalg` (LAPACK) where it has them;
LU with partial pivoting, which NumPy lacks, is written out (LAPACK getrf's pivot choice)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember_numpy_backend.kernels import kernel

Array = Any  # numpy.ndarray


@kernel("svd")
def _svd(a: Array, full_matrices: bool) -> tuple[Array, Array, Array]:
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return u, s, vh


@kernel("qr")
def _qr(a: Array, mode: str) -> tuple[Array, Array]:
    if mode == "r":
        return np.zeros([0], dtype=a.dtype), np.linalg.qr(a, mode="r")
    q, r = np.linalg.qr(a, mode="complete" if mode == "complete" else "reduced")
    return q, r


@kernel("eigh")
def _eigh(a: Array, upper: bool) -> tuple[Array, Array]:
    values, vectors = np.linalg.eigh(a, UPLO="U" if upper else "L")
    return values, vectors


@kernel("eig")
def _eig(a: Array) -> tuple[Array, Array]:
    values, vectors = np.linalg.eig(a)
    return values, vectors


@kernel("cholesky")
def _cholesky(a: Array) -> Array:
    return np.linalg.cholesky(np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2).conj())


@kernel("lu")
def _lu(a: Array) -> tuple[Array, Array]:
    *batch, m, n = a.shape
    factors = np.array(a, copy=True).reshape(math.prod(batch), m, n)
    pivots = np.zeros((factors.shape[0], min(m, n)), dtype=np.int32)
    for lu, swaps in zip(factors, pivots):
        for k in range(min(m, n)):
            row = k + int(np.argmax(np.abs(lu[k:, k])))  # the first largest, as LAPACK
            swaps[k] = row + 1
            if row != k:
                lu[[k, row]] = lu[[row, k]]
            if lu[k, k] != 0:
                lu[k + 1 :, k] /= lu[k, k]
            lu[k + 1 :, k + 1 :] -= np.outer(lu[k + 1 :, k], lu[k, k + 1 :])
    return factors.reshape(a.shape), pivots.reshape([*batch, min(m, n)])


@kernel("triangular_solve")
def _triangular_solve(a: Array, b: Array, upper: bool, left: bool, unitriangular: bool) -> Array:
    triangle = np.triu(a) if upper else np.tril(a)
    if unitriangular:
        n = a.shape[-1]
        triangle = triangle * (1 - np.eye(n, dtype=a.dtype)) + np.eye(n, dtype=a.dtype)
    if left:
        return np.linalg.solve(triangle, b)
    # x a = b  <=>  a^T x^T = b^T
    return np.swapaxes(
        np.linalg.solve(np.swapaxes(triangle, -1, -2), np.swapaxes(b, -1, -2)), -1, -2
    )
