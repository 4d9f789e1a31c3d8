"""ATen linear algebra written with the factorization prims (svd, qr, eigh, eig, cholesky, lu,
triangular_solve) and other ATen ops (expanded to prims by later rounds): the factorizations
themselves, triangular and Cholesky solves, LU solve/unpack, determinants, pseudo-inverse.

LU pivots (LAPACK's sequence of row swaps) become a permutation with one gather/scatter step
per row: static in shape, data-dependent only in values.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims

aten = torch.ops.aten


def _empty(like: torch.Tensor) -> torch.Tensor:
    return aten.zeros.default([0], dtype=like.dtype, device=like.device)


def _adjoint(a: torch.Tensor) -> torch.Tensor:
    moved = aten.transpose.int(a, -2, -1)
    return aten._conj_physical.default(moved) if a.dtype.is_complex else aten.clone.default(moved)


@to_prims("aten::_linalg_svd.default")
def _linalg_svd(
    a: torch.Tensor,
    full_matrices: bool = False,
    compute_uv: bool = True,
    *,
    driver: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    u, s, vh = prims.svd(a, full_matrices)
    if not compute_uv:
        return _empty(a), s, _empty(a)
    return u, s, vh


@to_prims("aten::linalg_qr.default")
def _linalg_qr(a: torch.Tensor, mode: str = "reduced") -> tuple[torch.Tensor, torch.Tensor]:
    return prims.qr(a, mode)


@to_prims("aten::_linalg_eigh.default")
def _linalg_eigh(
    a: torch.Tensor,
    UPLO: str = "L",
    compute_v: bool = True,  # noqa: N803  (ATen's name)
) -> tuple[torch.Tensor, torch.Tensor]:
    values, vectors = prims.eigh(a, UPLO == "U")
    return values, vectors if compute_v else _empty(a)


@to_prims("aten::linalg_eig.default")
def _linalg_eig(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return prims.eig(a)


@to_prims("aten::cholesky.default")
def _cholesky(a: torch.Tensor, upper: bool = False) -> torch.Tensor:
    lower = prims.cholesky(a)
    return _adjoint(lower) if upper else lower


@to_prims("aten::linalg_cholesky_ex.default")
def _linalg_cholesky_ex(
    a: torch.Tensor, *, upper: bool = False, check_errors: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    info = aten.zeros.default(list(a.shape[:-2]), dtype=torch.int32, device=a.device)
    return _cholesky(a, upper), info


@to_prims("aten::linalg_solve_triangular.default")
def _linalg_solve_triangular(
    a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False
) -> torch.Tensor:
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = aten.expand.default(a, [*batch, *a.shape[-2:]])
    b = aten.expand.default(b, [*batch, *b.shape[-2:]])
    return prims.triangular_solve(a, b, upper, left, unitriangular)


@to_prims("aten::triangular_solve.default")
def _triangular_solve(
    b: torch.Tensor,
    a: torch.Tensor,
    upper: bool = True,
    transpose: bool = False,
    unitriangular: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    coefficient = aten.transpose.int(a, -2, -1) if transpose else a
    solution = _linalg_solve_triangular(
        coefficient, b, upper=upper != transpose, unitriangular=unitriangular
    )
    return solution, aten.clone.default(a)


@to_prims("aten::cholesky_solve.default")
def _cholesky_solve(b: torch.Tensor, factor: torch.Tensor, upper: bool = False) -> torch.Tensor:
    # a = L L^H (or U^H U): solve L y = b, then L^H x = y
    lower = _adjoint(factor) if upper else factor
    y = _linalg_solve_triangular(lower, b, upper=False)
    return _linalg_solve_triangular(_adjoint(lower), y, upper=True)


@to_prims("aten::cholesky_inverse.default")
def _cholesky_inverse(factor: torch.Tensor, upper: bool = False) -> torch.Tensor:
    n = factor.shape[-1]
    identity = aten.eye.default(n, dtype=factor.dtype, device=factor.device)
    identity = aten.expand.default(identity, list(factor.shape))
    return _cholesky_solve(identity, factor, upper)


@to_prims("aten::linalg_lu_factor_ex.default")
def _linalg_lu_factor_ex(
    a: torch.Tensor, *, pivot: bool = True, check_errors: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not pivot:
        raise NotImplementedError("LU without pivoting has no prim")
    lu, pivots = prims.lu(a)
    info = aten.zeros.default(list(a.shape[:-2]), dtype=torch.int32, device=a.device)
    return lu, pivots, info


def permutation(pivots: torch.Tensor, rows: int) -> torch.Tensor:
    """perm with (P^T a)[i] = a[perm[i]] for LAPACK pivots (row i swapped with pivots[i] - 1)."""
    batch = list(pivots.shape[:-1])
    perm = aten.expand.default(aten.arange.default(rows, device=pivots.device), [*batch, rows])
    perm = aten.clone.default(perm)
    swaps = aten.sub.Scalar(aten._to_copy.default(pivots, dtype=torch.int64), 1)
    for i in range(pivots.shape[-1]):
        other = aten.slice.Tensor(swaps, -1, i, i + 1)  # [.., 1]
        here = aten.slice.Tensor(perm, -1, i, i + 1)
        there = aten.gather.default(perm, -1, other)
        perm = aten.scatter.src(perm, -1, aten.full_like.default(other, i), there)
        perm = aten.scatter.src(perm, -1, other, here)
    return perm


@to_prims("aten::lu_unpack.default")
def _lu_unpack(
    lu: torch.Tensor, pivots: torch.Tensor, unpack_data: bool = True, unpack_pivots: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = lu.shape[-2:]
    k = min(m, n)
    empty = aten.empty.memory_format([0], dtype=lu.dtype, device=lu.device)
    lower = upper = p = empty  # what ATen returns for the parts not asked for
    if unpack_data:
        lower = aten.tril.default(aten.slice.Tensor(lu, -1, 0, k), -1)
        lower = aten.add.Tensor(lower, aten.eye.m(m, k, dtype=lu.dtype, device=lu.device))
        upper = aten.triu.default(aten.slice.Tensor(lu, -2, 0, k))
    if unpack_pivots:
        perm = permutation(pivots, m)
        rows = aten.reshape.default(aten.arange.default(m, device=lu.device), [m, 1])
        p = aten.eq.Tensor(rows, aten.unsqueeze.default(perm, -2))  # P[perm[i], i] = 1
        p = aten._to_copy.default(p, dtype=lu.dtype)
    return p, lower, upper


def lu_solve(
    lu: torch.Tensor, pivots: torch.Tensor, b: torch.Tensor, adjoint: bool = False
) -> torch.Tensor:
    """x with a x = b (a^H x = b if adjoint) for a = P L U given as (lu, pivots)."""
    perm = permutation(pivots, lu.shape[-1])
    index = aten.expand.default(aten.unsqueeze.default(perm, -1), list(b.shape))
    if not adjoint:  # L U x = P^T b
        y = _linalg_solve_triangular(
            lu, aten.gather.default(b, -2, index), upper=False, unitriangular=True
        )
        return _linalg_solve_triangular(lu, y, upper=True)
    # U^H L^H P^T x = b: solve the two triangles, then undo the permutation
    z = _linalg_solve_triangular(_adjoint(lu), b, upper=False)
    w = _linalg_solve_triangular(_adjoint(lu), z, upper=True, unitriangular=True)
    return aten.scatter.src(aten.zeros_like.default(w), -2, index, w)


@to_prims("aten::linalg_lu_solve.default")
def _linalg_lu_solve(
    lu: torch.Tensor,
    pivots: torch.Tensor,
    b: torch.Tensor,
    *,
    left: bool = True,
    adjoint: bool = False,
) -> torch.Tensor:
    if left:
        return lu_solve(lu, pivots, b, adjoint)
    # x a = b  <=>  a^H x^H = b^H
    return _adjoint(lu_solve(lu, pivots, _adjoint(b), not adjoint))


def _diagonal_and_parity(
    lu: torch.Tensor, pivots: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    diagonal = aten.diagonal.default(lu, 0, -2, -1)
    steps = aten.arange.start(1, pivots.shape[-1] + 1, dtype=torch.int32, device=lu.device)
    swaps = aten.sum.dim_IntList(aten.ne.Tensor(pivots, steps), [-1])
    parity = aten.sub.Tensor(  # (-1) ** swaps
        aten.ones_like.default(swaps, dtype=lu.dtype),
        aten.mul.Scalar(aten._to_copy.default(aten.remainder.Scalar(swaps, 2), dtype=lu.dtype), 2),
    )
    return diagonal, parity


def _lu_of_transpose(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen's det and slogdet return the LU factors of a^T (LAPACK factors a's column-major
    memory), which their backward formulas solve with; det(a^T) = det(a)."""
    return prims.lu(aten.transpose.int(a, -2, -1))


@to_prims("aten::_linalg_det.default")
def _linalg_det(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lu, pivots = _lu_of_transpose(a)
    diagonal, parity = _diagonal_and_parity(lu, pivots)
    return aten.mul.Tensor(aten.prod.dim_int(diagonal, -1), parity), lu, pivots


@to_prims("aten::_linalg_slogdet.default")
def _linalg_slogdet(
    a: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    lu, pivots = _lu_of_transpose(a)
    diagonal, parity = _diagonal_and_parity(lu, pivots)
    signs = aten.prod.dim_int(aten.sgn.default(diagonal), -1)
    logabsdet = aten.sum.dim_IntList(aten.log.default(aten.abs.default(diagonal)), [-1])
    return aten.mul.Tensor(signs, parity), logabsdet, lu, pivots


@to_prims("aten::linalg_pinv.atol_rtol_tensor", "aten::linalg_pinv.atol_rtol_float")
def _linalg_pinv(
    a: torch.Tensor,
    *,
    atol: Any = None,
    rtol: Any = None,
    hermitian: bool = False,
) -> torch.Tensor:
    m, n = a.shape[-2:]
    if m == 0 or n == 0:
        return aten.zeros.default([*a.shape[:-2], n, m], dtype=a.dtype, device=a.device)
    real = a.real.dtype if a.dtype.is_complex else a.dtype
    if rtol is None:
        rtol = 0.0 if atol is not None else torch.finfo(real).eps * max(m, n)
    if hermitian:
        values, vectors = prims.eigh(a, False)
        magnitude = aten.abs.default(values)
        left, right = vectors, _adjoint(vectors)
    else:
        left, magnitude, right = prims.svd(a, False)
        values = magnitude
        left, right = _adjoint(right), _adjoint(left)  # pinv = V diag(1/s) U^H
    largest = aten.amax.default(magnitude, [-1], True)
    cutoff = (
        aten.mul.Tensor(largest, rtol)
        if isinstance(rtol, torch.Tensor)
        else aten.mul.Scalar(largest, rtol)
    )
    if atol is not None:
        floor = atol if isinstance(atol, torch.Tensor) else aten.full_like.default(cutoff, atol)
        cutoff = aten.maximum.default(cutoff, floor)
    keep = aten.gt.Tensor(magnitude, cutoff)
    inverse = aten.where.self(
        keep, aten.reciprocal.default(values), aten.zeros_like.default(values)
    )
    scaled = aten.mul.Tensor(
        left, aten.unsqueeze.default(aten._to_copy.default(inverse, dtype=a.dtype), -2)
    )
    return aten.matmul.default(scaled, right)


@to_prims("aten::linalg_lu.default")
def _linalg_lu(a: torch.Tensor, *, pivot: bool = True) -> tuple[torch.Tensor, ...]:
    lu, pivots, _ = _linalg_lu_factor_ex(a, pivot=pivot)
    return _lu_unpack(lu, pivots)


def _identity_like(a: torch.Tensor) -> torch.Tensor:
    n = a.shape[-1]
    return aten.expand.default(aten.eye.default(n, dtype=a.dtype, device=a.device), list(a.shape))


@to_prims("aten::linalg_inv_ex.default")
def _linalg_inv_ex(
    a: torch.Tensor, *, check_errors: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    lu, pivots, info = _linalg_lu_factor_ex(a)
    return lu_solve(lu, pivots, _identity_like(a)), info


@to_prims("aten::_linalg_solve_ex.default")
def _linalg_solve_ex(
    a: torch.Tensor, b: torch.Tensor, *, left: bool = True, check_errors: bool = False
) -> tuple[torch.Tensor, ...]:
    lu, pivots, info = _linalg_lu_factor_ex(a)
    vector = b.dim() == 1 or (b.dim() == a.dim() - 1 and list(b.shape) == list(a.shape[:-1]))
    rhs = aten.unsqueeze.default(b, -1) if vector else b
    batch = torch.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    rhs = aten.expand.default(rhs, [*batch, *rhs.shape[-2:]])
    factors = aten.expand.default(lu, [*batch, *lu.shape[-2:]])
    swaps = aten.expand.default(pivots, [*batch, pivots.shape[-1]])
    x = _linalg_lu_solve(factors, swaps, rhs, left=left)
    return (aten.squeeze.dim(x, -1) if vector else x), lu, pivots, info
