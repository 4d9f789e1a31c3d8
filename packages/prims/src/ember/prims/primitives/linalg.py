"""Contraction prims: batched matrix multiply and N-d convolution (forward, no bias).

These are the prims a vendor maps to its GEMM and convolution libraries; everything around
them (bias, transposed convolution, gradients) decomposes to them and the other prims.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ember.prims.primitives.prim import define

FAMILY = "linalg"


def _matmul_meta(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() < 2 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"matmul: needs equal batch dims and rank >= 2: {a.shape} @ {b.shape}")
    if a.shape[-1] != b.shape[-2] or a.dtype != b.dtype:
        raise ValueError(f"matmul: {a.shape}({a.dtype}) @ {b.shape}({b.dtype}) do not fit")
    return torch.empty([*a.shape[:-1], b.shape[-1]], dtype=a.dtype, device="meta")


define(
    "matmul",
    "(Tensor a, Tensor b) -> Tensor",
    _matmul_meta,
    lambda a, b: torch.matmul(a, b).contiguous(),
    family=FAMILY,
    doc="out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]; same rank >= 2, equal batch dims",
)


def _convolution(
    x: torch.Tensor,
    w: torch.Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> torch.Tensor:
    spatial = x.dim() - 2
    return torch.ops.aten.convolution.default(
        x, w, None, list(stride), list(padding), list(dilation), False, [0] * spatial, groups
    ).contiguous()


def _convolution_meta(
    x: torch.Tensor,
    w: torch.Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> torch.Tensor:
    if x.dtype != w.dtype:
        raise TypeError("convolution: input and weight differ in dtype")
    out = _convolution(x, w, stride, padding, dilation, groups)
    return torch.empty(out.shape, dtype=x.dtype, device="meta")


define(
    "convolution",
    "(Tensor input, Tensor weight, int[] stride, int[] padding, int[] dilation, "
    "int groups) -> Tensor",
    _convolution_meta,
    _convolution,
    family=FAMILY,
    doc="cross-correlation of input [N, C, *spatial] with weight [O, C/groups, *kernel]; "
    "symmetric zero padding; out size (in + 2p - d(k-1) - 1) // s + 1 per spatial dim",
)
