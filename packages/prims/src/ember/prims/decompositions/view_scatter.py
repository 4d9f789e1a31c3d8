"""ATen `*_scatter` ops (select, slice, diagonal, as_strided): a copy of `self` with `src`
written into one view of it.

Each is the same construction: number the elements of `self` (an arange of its shape), take
the view of those numbers to learn which elements the view covers, and scatter `src` there.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten


def scatter_into_view(
    a: torch.Tensor, src: torch.Tensor, view: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """A copy of `a` whose elements in `view(a)` are replaced by `src` (of the view's shape)."""
    numbers = aten.reshape.default(
        aten.arange.default(a.numel(), dtype=torch.int64, device=a.device), list(a.shape)
    )
    positions = aten.reshape.default(view(numbers), [-1])
    flat = aten.reshape.default(a, [-1])
    values = aten.reshape.default(aten._to_copy.default(src, dtype=a.dtype), [-1])
    written = aten.scatter.src(flat, 0, positions, values)
    return aten.reshape.default(written, list(a.shape))


@to_prims("aten::select_scatter.default")
def _select_scatter(a: torch.Tensor, src: torch.Tensor, dim: int, index: int) -> torch.Tensor:
    return scatter_into_view(a, src, lambda n: aten.select.int(n, dim, index))


@to_prims("aten::slice_scatter.default")
def _slice_scatter(
    a: torch.Tensor,
    src: torch.Tensor,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> torch.Tensor:
    return scatter_into_view(a, src, lambda n: aten.slice.Tensor(n, dim, start, end, step))


@to_prims("aten::diagonal_scatter.default")
def _diagonal_scatter(
    a: torch.Tensor, src: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1
) -> torch.Tensor:
    return scatter_into_view(a, src, lambda n: aten.diagonal.default(n, offset, dim1, dim2))


@to_prims("aten::as_strided_scatter.default")
def _as_strided_scatter(
    a: torch.Tensor,
    src: torch.Tensor,
    size: list[int],
    stride: list[int],
    storage_offset: int | None = None,
) -> torch.Tensor:
    return scatter_into_view(
        a, src, lambda n: aten.as_strided.default(n, size, stride, storage_offset)
    )
