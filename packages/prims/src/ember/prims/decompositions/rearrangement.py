"""ATen ops that rearrange or embed elements, written with other ATen ops (expanded to prims by
the following rounds of `decompose`): pixel and channel shuffles, rot90, diag_embed,
block_diag, _chunk_cat, trace, addbmm, glu.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.prims.decompositions.operands import promote_types
from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten


@to_prims("aten::pixel_shuffle.default")
def _pixel_shuffle(a: torch.Tensor, upscale_factor: int) -> torch.Tensor:
    r = upscale_factor
    *batch, channels, height, width = a.shape
    n = len(batch)
    split = aten.reshape.default(a, [*batch, channels // (r * r), r, r, height, width])
    order = [*range(n), n, n + 3, n + 1, n + 4, n + 2]
    moved = aten.permute.default(split, order)
    return aten.clone.default(
        aten.reshape.default(moved, [*batch, channels // (r * r), height * r, width * r])
    )


@to_prims("aten::pixel_unshuffle.default")
def _pixel_unshuffle(a: torch.Tensor, downscale_factor: int) -> torch.Tensor:
    r = downscale_factor
    *batch, channels, height, width = a.shape
    n = len(batch)
    split = aten.reshape.default(a, [*batch, channels, height // r, r, width // r, r])
    order = [*range(n), n, n + 2, n + 4, n + 1, n + 3]
    moved = aten.permute.default(split, order)
    return aten.clone.default(
        aten.reshape.default(moved, [*batch, channels * r * r, height // r, width // r])
    )


@to_prims("aten::channel_shuffle.default", "aten::native_channel_shuffle.default")
def _channel_shuffle(a: torch.Tensor, groups: int) -> torch.Tensor:
    batch, channels, *rest = a.shape
    split = aten.reshape.default(a, [batch, groups, channels // groups, *rest])
    moved = aten.transpose.int(split, 1, 2)
    return aten.clone.default(aten.reshape.default(moved, list(a.shape)))


@to_prims("aten::rot90.default")
def _rot90(a: torch.Tensor, k: int = 1, dims: list[int] | None = None) -> torch.Tensor:
    first, second = dims if dims is not None else (0, 1)
    k %= 4
    if k == 1:
        return aten.transpose.int(aten.flip.default(a, [second]), first, second)
    if k == 2:
        return aten.flip.default(a, [first, second])
    if k == 3:
        return aten.flip.default(aten.transpose.int(a, first, second), [second])
    return aten.clone.default(a)


@to_prims("aten::diag_embed.default")
def _diag_embed(a: torch.Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> torch.Tensor:
    ndim = a.dim() + 1
    dim1, dim2 = dim1 % ndim, dim2 % ndim
    size = a.shape[-1] + abs(offset)
    rest = list(a.shape[:-1])
    shape = []
    for d in range(ndim):
        shape.append(size if d in (dim1, dim2) else rest.pop(0))
    zeros = aten.zeros.default(shape, dtype=a.dtype, device=a.device)
    return aten.diagonal_scatter.default(zeros, a, offset, dim1, dim2)


@to_prims("aten::block_diag.default")
def _block_diag(tensors: list[torch.Tensor]) -> torch.Tensor:
    blocks = [
        t if t.dim() == 2 else aten.reshape.default(t, [1, -1] if t.dim() == 1 else [1, 1])
        for t in tensors
    ]
    dtype = blocks[0].dtype
    for block in blocks[1:]:
        dtype = promote_types(dtype, block.dtype)
    columns = sum(b.shape[1] for b in blocks)
    rows = []
    left = 0
    for block in blocks:
        right = columns - left - block.shape[1]
        converted = aten._to_copy.default(block, dtype=dtype)
        rows.append(aten.constant_pad_nd.default(converted, [left, right, 0, 0], 0))
        left += block.shape[1]
    return aten.cat.default(rows, 0)


@to_prims("aten::_chunk_cat.default")
def _chunk_cat(tensors: list[torch.Tensor], dim: int, num_chunks: int) -> torch.Tensor:
    pieces = []
    for t in tensors:
        d = dim % t.dim()
        size = t.shape[d]
        chunk = -(-size // num_chunks)
        padded = aten.constant_pad_nd.default(
            t, [0, 0] * (t.dim() - d - 1) + [0, chunk * num_chunks - size], 0
        )
        pieces.append(aten.reshape.default(padded, [*t.shape[:d], num_chunks, -1]))
    return aten.cat.default(pieces, dim % tensors[0].dim() + 1)


@to_prims("aten::trace.default")
def _trace(a: torch.Tensor) -> torch.Tensor:
    return aten.sum.default(aten.diagonal.default(a, 0, 0, 1))


@to_prims("aten::addbmm.default")
def _addbmm(
    a: torch.Tensor,
    batch1: torch.Tensor,
    batch2: torch.Tensor,
    *,
    beta: Any = 1,
    alpha: Any = 1,
) -> torch.Tensor:
    # one matrix product over the batch folded into the reduction dim
    batches, rows, inner = batch1.shape
    left = aten.reshape.default(aten.permute.default(batch1, [1, 0, 2]), [rows, batches * inner])
    right = aten.reshape.default(batch2, [batches * inner, batch2.shape[2]])
    product = aten.mm.default(left, right)
    if alpha != 1:
        product = aten.mul.Scalar(product, alpha)
    if beta == 0:
        return aten.add.Tensor(aten.zeros_like.default(a), product)
    scaled = a if beta == 1 else aten.mul.Scalar(a, beta)
    return aten.add.Tensor(scaled, product)


@to_prims("aten::glu.default")
def _glu(a: torch.Tensor, dim: int = -1) -> torch.Tensor:
    first, second = aten.chunk.default(a, 2, dim)
    return aten.mul.Tensor(first, aten.sigmoid.default(second))
