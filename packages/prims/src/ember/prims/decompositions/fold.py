"""Summing windows back into the tensor they were cut from: `col2im` (F.fold, and im2col's
gradient) and `unfold_backward` (Tensor.unfold's gradient).

A window offset (a kernel position, a place within an unfold window) reads a strided grid of
the output: each offset's slice is spread onto that grid by `prims.pad` (interior padding for
the stride, low/high padding for the offset, negative padding to crop), and the offsets'
contributions are summed. Only sizes flow through, so the decompositions hold for symbolic
sizes, where torch's meta kernels of these ops take concrete sizes only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims

aten = torch.ops.aten


def _sum(terms: list[torch.Tensor]) -> torch.Tensor:
    total = terms[0]
    for term in terms[1:]:
        total = aten.add.Tensor(total, term)
    return total


@to_prims("aten::col2im.default")
def _col2im(
    columns: torch.Tensor,
    output_size: Sequence[Any],
    kernel_size: Sequence[int],
    dilation: Sequence[int],
    padding: Sequence[int],
    stride: Sequence[int],
) -> torch.Tensor:
    batched = columns.dim() == 3
    x = columns if batched else aten.unsqueeze.default(columns, 0)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel_size, dilation, padding, stride
    oh, ow = output_size
    blocks_h = (oh + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    blocks_w = (ow + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    planes = x.shape[1] // (kh * kw)
    x = aten.reshape.default(x, [x.shape[0], planes, kh, kw, blocks_h, blocks_w])
    terms = []
    for i in range(kh):
        for j in range(kw):
            block = aten.select.int(aten.select.int(x, 2, i), 2, j)  # [N, C, blocks_h, blocks_w]
            # block (a, b) lands on padded row i * dh + a * sh, column j * dw + b * sw
            low = [0, 0, i * dh - ph, j * dw - pw]
            high = [
                0,
                0,
                oh + ph - i * dh - (blocks_h - 1) * sh - 1,
                ow + pw - j * dw - (blocks_w - 1) * sw - 1,
            ]
            terms.append(prims.pad(block, 0, low, high, [0, 0, sh - 1, sw - 1]))
    result = _sum(terms)
    return result if batched else aten.squeeze.dim(result, 0)


@to_prims("aten::unfold_backward.default")
def _unfold_backward(
    grad: torch.Tensor, input_sizes: Sequence[Any], dim: int, size: int, step: int
) -> torch.Tensor:
    if not input_sizes:  # a 0-d tensor unfolds to one window of one element
        return aten.reshape.default(grad, [])
    dim = dim + len(input_sizes) if dim < 0 else dim
    windows = grad.shape[dim]
    length = input_sizes[dim]
    rank = len(input_sizes)
    terms = []
    for offset in range(size):
        # element `offset` of window w came from position w * step + offset along dim
        piece = aten.select.int(grad, -1, offset)
        low = [offset if d == dim else 0 for d in range(rank)]
        high = [length - offset - (windows - 1) * step - 1 if d == dim else 0 for d in range(rank)]
        interior = [step - 1 if d == dim else 0 for d in range(rank)]
        terms.append(prims.pad(piece, 0, low, high, interior))
    return _sum(terms)
