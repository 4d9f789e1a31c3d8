"""ATen pooling written with prims: windows are strided views (`as_strided`) of the padded
input, reduced with amax/argmax (max pooling, whose indices point into each input plane) or
sum (average pooling); max pooling's backward scatters gradients back through the indices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.operands import scalar_like
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims


def _pair(values: Sequence[int] | int, default: Sequence[int] | None = None) -> list[int]:
    if isinstance(values, int):
        return [values, values]
    if len(values) == 0 and default is not None:
        return list(default)
    return list(values) * 2 if len(values) == 1 else list(values)


def _out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _windows(
    x: torch.Tensor,
    value: float,
    k: list[int],
    s: list[int],
    p: list[int],
    d: list[int],
    ceil_mode: bool,
) -> tuple[torch.Tensor, list[int]]:
    """[N, C, oh, ow, kh * kw] windows of x (4-d) padded with value."""
    n, c, h, w = x.shape
    out = [_out_size(size, k[i], s[i], p[i], d[i], ceil_mode) for i, size in enumerate((h, w))]
    high = [
        max((out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - (size + p[i]), 0)
        for i, size in enumerate((h, w))
    ]
    padded = prims.pad(x, value, [0, 0, p[0], p[1]], [0, 0, high[0], high[1]], [0, 0, 0, 0])
    hp, wp = padded.shape[2], padded.shape[3]
    view = prims.as_strided(
        padded,
        [n, c, out[0], out[1], k[0], k[1]],
        [c * hp * wp, hp * wp, s[0] * wp, s[1], d[0] * wp, d[1]],
        0,
    )
    return prims.reshape(view, [n, c, out[0], out[1], k[0] * k[1]]), out


def _batched(x: torch.Tensor) -> torch.Tensor:
    return prims.unsqueeze(x, 0) if x.dim() == 3 else x


@to_prims("aten::max_pool2d_with_indices.default")
def _max_pool2d(
    x: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    k = _pair(kernel_size)
    s, p, d = _pair(stride, k), _pair(padding), _pair(dilation)
    xb = _batched(x)
    windows, out = _windows(xb, -math.inf, k, s, p, d, ceil_mode)
    values = prims.amax(windows, [4])
    local = prims.argmax(windows, 4)
    ki = prims.div(local, scalar_like(k[1], local))
    kj = prims.remainder(local, scalar_like(k[1], local))
    shape = list(local.shape)
    oh = prims.broadcast_in_dim(
        prims.iota(out[0], 0, s[0], dtype=torch.int64, device=x.device), shape, [2]
    )
    ow = prims.broadcast_in_dim(
        prims.iota(out[1], 0, s[1], dtype=torch.int64, device=x.device), shape, [3]
    )
    row = prims.add(prims.sub(oh, scalar_like(p[0], oh)), prims.mul(ki, scalar_like(d[0], ki)))
    col = prims.add(prims.sub(ow, scalar_like(p[1], ow)), prims.mul(kj, scalar_like(d[1], kj)))
    indices = prims.add(prims.mul(row, scalar_like(xb.shape[3], row)), col)
    if x.dim() == 3:
        return prims.squeeze(values, [0]), prims.squeeze(indices, [0])
    return values, indices


@to_prims("aten::max_pool2d_with_indices_backward.default")
def _max_pool2d_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
    indices: torch.Tensor,
) -> torch.Tensor:
    xb, gb, ib = _batched(x), _batched(grad), _batched(indices)
    n, c, h, w = xb.shape
    plane = gb.shape[2] * gb.shape[3]
    zeros = prims.full([n, c, h * w], 0, dtype=grad.dtype, device=grad.device)
    flat_grad = prims.reshape(gb, [n, c, plane])
    flat_index = prims.reshape(ib, [n, c, plane])
    result = prims.reshape(prims.scatter_add(zeros, 2, flat_index, flat_grad), list(xb.shape))
    return prims.squeeze(result, [0]) if x.dim() == 3 else result


@to_prims("aten::avg_pool2d.default")
def _avg_pool2d(
    x: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> torch.Tensor:
    k = _pair(kernel_size)
    s, p, d = _pair(stride, k), _pair(padding), [1, 1]
    xb = _batched(x)
    windows, _ = _windows(xb, 0.0, k, s, p, d, ceil_mode)
    total = prims.sum(windows, [4])
    if divisor_override:
        result = prims.div(total, scalar_like(divisor_override, total))
    else:
        h, w = xb.shape[2], xb.shape[3]
        ones = prims.full([1, 1, h, w], 1, dtype=x.dtype, device=x.device)
        if count_include_pad:
            ones = prims.pad(ones, 1.0, [0, 0, p[0], p[1]], [0, 0, p[0], p[1]], [0, 0, 0, 0])
            counted, _ = _windows(ones, 0.0, k, s, [0, 0], d, ceil_mode)
        else:
            counted, _ = _windows(ones, 0.0, k, s, p, d, ceil_mode)
        counts = prims.broadcast_in_dim(prims.sum(counted, [4]), list(total.shape), [0, 1, 2, 3])
        result = prims.div(total, counts)
    return prims.squeeze(result, [0]) if x.dim() == 3 else result


@to_prims("aten::_adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(x: torch.Tensor, output_size: Sequence[int]) -> torch.Tensor:
    h, w = x.shape[-2], x.shape[-1]
    oh, ow = _pair(output_size)
    if h % oh or w % ow:
        raise NotImplementedError("adaptive pooling with uneven windows")
    return _avg_pool2d(x, [h // oh, w // ow], [h // oh, w // ow])
