"""Matrix factorization prims (batched over leading dims): SVD, QR, symmetric and general
eigendecomposition, Cholesky, LU with partial pivoting, and triangular solve. Solvers,
inverses, determinants, pseudo-inverses and norms decompose onto them; a vendor maps each to
its LAPACK-style library.

Factors whose sign or phase is not unique (singular and eigen vectors) follow the vendor's
library: decompositions only use them in sign-invariant combinations.
"""

from __future__ import annotations

import torch

from ember.prims.primitives.prim import define

FAMILY = "factorizations"


def _square(name: str, a: torch.Tensor) -> None:
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"prims::{name} takes square matrices, got {list(a.shape)}")


def _svd_meta(a: torch.Tensor, full_matrices: bool) -> tuple[torch.Tensor, ...]:
    *batch, m, n = a.shape
    k = min(m, n)
    real = a.real.dtype if a.dtype.is_complex else a.dtype
    u_cols, v_rows = (m, n) if full_matrices else (k, k)
    return (
        torch.empty([*batch, m, u_cols], dtype=a.dtype, device="meta"),
        torch.empty([*batch, k], dtype=real, device="meta"),
        torch.empty([*batch, v_rows, n], dtype=a.dtype, device="meta"),
    )


define(
    "svd",
    "(Tensor a, bool full_matrices) -> (Tensor U, Tensor S, Tensor Vh)",
    _svd_meta,
    lambda a, full_matrices: tuple(
        t.contiguous() for t in torch.linalg.svd(a, full_matrices=full_matrices)
    ),
    family=FAMILY,
    doc="a = U diag(S) Vh, S descending and non-negative (real dtype); U [.., m, m or k], "
    "Vh [.., n or k, n], k = min(m, n)",
)


def _qr_meta(a: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    *batch, m, n = a.shape
    k = min(m, n)
    q_cols, r_rows = (m, m) if mode == "complete" else (k, k)
    q_shape = [0] if mode == "r" else [*batch, m, q_cols]
    return (
        torch.empty(q_shape, dtype=a.dtype, device="meta"),
        torch.empty([*batch, r_rows, n], dtype=a.dtype, device="meta"),
    )


define(
    "qr",
    "(Tensor a, str mode) -> (Tensor Q, Tensor R)",
    _qr_meta,
    lambda a, mode: tuple(t.contiguous() for t in torch.linalg.qr(a, mode=mode)),
    family=FAMILY,
    doc="a = Q R, Q with orthonormal columns, R upper triangular; mode 'reduced' (k = min(m, "
    "n) columns), 'complete' (m) or 'r' (Q empty)",
)


def _eigh_meta(a: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _square("eigh", a)
    real = a.real.dtype if a.dtype.is_complex else a.dtype
    return (
        torch.empty(a.shape[:-1], dtype=real, device="meta"),
        torch.empty(a.shape, dtype=a.dtype, device="meta"),
    )


define(
    "eigh",
    "(Tensor a, bool upper) -> (Tensor eigenvalues, Tensor eigenvectors)",
    _eigh_meta,
    lambda a, upper: tuple(
        t.contiguous() for t in torch.linalg.eigh(a, UPLO="U" if upper else "L")
    ),
    family=FAMILY,
    doc="eigenvalues (ascending, real) and orthonormal eigenvectors (columns) of the "
    "Hermitian matrix whose lower (upper if upper) triangle is a's",
)


def _eig_meta(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _square("eig", a)
    complex_dtype = (
        a.dtype
        if a.dtype.is_complex
        else (torch.complex128 if a.dtype == torch.float64 else torch.complex64)
    )
    return (
        torch.empty(a.shape[:-1], dtype=complex_dtype, device="meta"),
        torch.empty(a.shape, dtype=complex_dtype, device="meta"),
    )


define(
    "eig",
    "(Tensor a) -> (Tensor eigenvalues, Tensor eigenvectors)",
    _eig_meta,
    lambda a: tuple(t.contiguous() for t in torch.linalg.eig(a)),
    family=FAMILY,
    doc="complex eigenvalues and unit eigenvectors (columns) of a general square matrix",
)


def _cholesky_meta(a: torch.Tensor) -> torch.Tensor:
    _square("cholesky", a)
    return torch.empty(a.shape, dtype=a.dtype, device="meta")


define(
    "cholesky",
    "(Tensor a) -> Tensor",
    _cholesky_meta,
    lambda a: torch.linalg.cholesky(a).contiguous(),
    family=FAMILY,
    doc="lower triangular L with a = L L^H, for Hermitian positive-definite a (lower "
    "triangle read)",
)


def _lu_meta(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    *batch, m, n = a.shape
    return (
        torch.empty(a.shape, dtype=a.dtype, device="meta"),
        torch.empty([*batch, min(m, n)], dtype=torch.int32, device="meta"),
    )


define(
    "lu",
    "(Tensor a) -> (Tensor LU, Tensor pivots)",
    _lu_meta,
    lambda a: tuple(t.contiguous() for t in torch.linalg.lu_factor(a)),
    family=FAMILY,
    doc="LU factorization with partial pivoting, LAPACK's getrf: L (unit lower, below the "
    "diagonal) and U packed in LU; row i was swapped with row pivots[i] - 1 (int32, 1-based)",
)


def _triangular_solve_meta(
    a: torch.Tensor, b: torch.Tensor, upper: bool, left: bool, unitriangular: bool
) -> torch.Tensor:
    _square("triangular_solve", a)
    if a.dtype != b.dtype or a.shape[:-2] != b.shape[:-2]:
        raise ValueError("prims::triangular_solve: a and b need one dtype and equal batch dims")
    return torch.empty(b.shape, dtype=b.dtype, device="meta")


define(
    "triangular_solve",
    "(Tensor a, Tensor b, bool upper, bool left, bool unitriangular) -> Tensor",
    _triangular_solve_meta,
    lambda a, b, upper, left, unitriangular: torch.linalg.solve_triangular(
        a, b, upper=upper, left=left, unitriangular=unitriangular
    ).contiguous(),
    family=FAMILY,
    doc="X with a X = b (left) or X a = b, a triangular (upper or lower; its other triangle "
    "is not read; unit diagonal assumed if unitriangular); equal batch dims",
)
