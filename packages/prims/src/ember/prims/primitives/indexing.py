"""Indexing prims: gather, scatter and scatter with accumulation along one dim.

Indices are int64 and in range (decompositions wrap negative indices); index and src have the
same rank as the operand. Results are new contiguous tensors; the operand is not written.
"""

from __future__ import annotations

import torch

from ember.prims.primitives.prim import define

FAMILY = "indexing"


def _gather_meta(a: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    if index.dtype != torch.int64 or index.dim() != a.dim():
        raise TypeError("gather: index must be int64 with the operand's rank")
    return torch.empty(index.shape, dtype=a.dtype, device="meta")


define(
    "gather",
    "(Tensor a, int dim, Tensor index) -> Tensor",
    _gather_meta,
    lambda a, dim, index: torch.gather(a, dim, index).contiguous(),
    family=FAMILY,
    doc="out[i][j][k] = a[index[i][j][k]][j][k] for dim 0 (and so on for the other dims)",
)


def _scatter_meta(
    a: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, *rest: object
) -> torch.Tensor:
    if index.dtype != torch.int64 or index.shape != src.shape or src.dtype != a.dtype:
        raise TypeError("scatter: index must be int64 shaped like src; src of a's dtype")
    return torch.empty(a.shape, dtype=a.dtype, device="meta")


define(
    "scatter",
    "(Tensor a, int dim, Tensor index, Tensor src) -> Tensor",
    _scatter_meta,
    lambda a, dim, index, src: torch.scatter(a, dim, index, src).contiguous(),
    family=FAMILY,
    doc="copy of a with out[index[i][j]][j] = src[i][j] (dim 0); with repeated indices one "
    "of the writes wins, unspecified which",
)
define(
    "scatter_add",
    "(Tensor a, int dim, Tensor index, Tensor src) -> Tensor",
    _scatter_meta,
    lambda a, dim, index, src: torch.scatter_add(a, dim, index, src).contiguous(),
    family=FAMILY,
    doc="copy of a with out[index[i][j]][j] += src[i][j] (dim 0), every write accumulated",
)


def _scatter_reduce(
    a: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str
) -> torch.Tensor:
    return torch.scatter_reduce(a, dim, index, src, reduce, include_self=True).contiguous()


define(
    "scatter_reduce",
    "(Tensor a, int dim, Tensor index, Tensor src, str reduce) -> Tensor",
    _scatter_meta,
    _scatter_reduce,
    family=FAMILY,
    doc="copy of a combining each src[i][j] into out[index[i][j]][j] (dim 0) with reduce: "
    "'prod', 'amax' or 'amin' (a's own values included)",
)
