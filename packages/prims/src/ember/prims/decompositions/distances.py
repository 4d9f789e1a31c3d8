"""ATen norms and distances written with `linalg_vector_norm` and other ATen ops (expanded to
prims by later rounds): norm with dims, dist, cdist, pdist, renorm and the cross product.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten


@to_prims("aten::norm.ScalarOpt_dim", "aten::norm.Scalar", "aten::norm.ScalarOpt_dim_dtype")
def _norm(
    a: torch.Tensor,
    p: Any = 2,
    dim: list[int] | None = None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    order = 2 if p is None else p
    return aten.linalg_vector_norm.default(a, order, dim, keepdim, dtype=dtype)


@to_prims("aten::dist.default")
def _dist(a: torch.Tensor, b: torch.Tensor, p: Any = 2) -> torch.Tensor:
    return aten.linalg_vector_norm.default(aten.sub.Tensor(a, b), p)


@to_prims("aten::_cdist_forward.default")
def _cdist(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: int | None) -> torch.Tensor:
    difference = aten.sub.Tensor(aten.unsqueeze.default(x1, -2), aten.unsqueeze.default(x2, -3))
    return aten.linalg_vector_norm.default(difference, p, [-1])


@to_prims("aten::_pdist_forward.default")
def _pdist(a: torch.Tensor, p: float = 2.0) -> torch.Tensor:
    """The distances of rows i < j, row by row: the upper triangle of cdist, flattened."""
    rows = a.shape[0]
    if rows < 2:
        return aten.zeros.default([0], dtype=a.dtype, device=a.device)
    pieces = []
    for i in range(rows - 1):
        row = aten.slice.Tensor(a, 0, i, i + 1)
        later = aten.slice.Tensor(a, 0, i + 1, rows)
        pieces.append(aten.linalg_vector_norm.default(aten.sub.Tensor(later, row), p, [-1]))
    return aten.cat.default(pieces, 0)


@to_prims("aten::renorm.default")
def _renorm(a: torch.Tensor, p: Any, dim: int, maxnorm: Any) -> torch.Tensor:
    d = dim % a.dim()
    others = [i for i in range(a.dim()) if i != d]
    norms = aten.linalg_vector_norm.default(a, p, others, True)
    # torch scales the slices whose norm exceeds maxnorm by maxnorm / (norm + 1e-7)
    scale = aten.div.Tensor(aten.full_like.default(norms, maxnorm), aten.add.Scalar(norms, 1e-7))
    factor = aten.where.self(aten.gt.Scalar(norms, maxnorm), scale, aten.ones_like.default(norms))
    return aten.mul.Tensor(a, factor)


@to_prims("aten::linalg_cross.default")
def _cross(a: torch.Tensor, b: torch.Tensor, *, dim: int = -1) -> torch.Tensor:
    shape = torch.broadcast_shapes(a.shape, b.shape)
    x, y = aten.expand.default(a, list(shape)), aten.expand.default(b, list(shape))

    def rolled(t: torch.Tensor, shift: int) -> torch.Tensor:
        return aten.roll.default(t, [shift], [dim])

    return aten.sub.Tensor(
        aten.mul.Tensor(rolled(x, -1), rolled(y, -2)),
        aten.mul.Tensor(rolled(x, -2), rolled(y, -1)),
    )
