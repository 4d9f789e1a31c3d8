"""ATen resampling written with gather tables computed from the sizes: every output position
along a dim reads a few input positions with weights, both computed with `arange` arithmetic
in the Graph (no constant tables). Nearest, linear, bilinear, trilinear and bicubic
upsampling, and reflection and replication padding.

`take_along` and `combine_along` are the two building blocks (pooling.py uses them too): each
dim is one gather (`index_select`) and, with weights, one weighted sum.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten

F64 = torch.float64


def positions(count: int, device: torch.device, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """[0, 1, ..., count - 1] as a Graph value."""
    return aten.arange.default(count, dtype=dtype, device=device)


def take_along(x: torch.Tensor, dim: int, table: torch.Tensor) -> torch.Tensor:
    """x with `dim` replaced by the two dims of the int64 table [O, K]:
    out[.., o, k, ..] = x[.., table[o, k], ..]."""
    rows, width = table.shape
    picked = aten.index_select.default(x, dim, aten.reshape.default(table, [-1]))
    return aten.reshape.default(picked, [*x.shape[:dim], rows, width, *x.shape[dim + 1 :]])


def combine_along(
    x: torch.Tensor, dim: int, table: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """out[.., o, ..] = sum over k of weights[o, k] * x[.., table[o, k], ..]."""
    picked = take_along(x, dim, table)
    rows, width = table.shape
    shape = [1] * dim + [rows, width] + [1] * (x.dim() - dim - 1)
    factors = aten.reshape.default(aten._to_copy.default(weights, dtype=x.dtype), shape)
    return aten.sum.dim_IntList(aten.mul.Tensor(picked, factors), [dim + 1])


def columns(*parts: torch.Tensor) -> torch.Tensor:
    """[O] tensors side by side as an [O, K] table."""
    return aten.stack.default(list(parts), 1)


def _source(
    size: int, out: int, align_corners: bool, scale: float | None, device: torch.device
) -> torch.Tensor:
    """The input coordinate of each output position (ATen's area_pixel_compute_source_index),
    in float64."""
    o = positions(out, device, F64)
    if align_corners:
        ratio = (size - 1) / (out - 1) if out > 1 else 0.0
        return aten.mul.Scalar(o, ratio)
    ratio = 1.0 / scale if scale else size / out
    return aten.sub.Scalar(aten.mul.Scalar(aten.add.Scalar(o, 0.5), ratio), 0.5)


def _linear_rows(
    size: int, out: int, align_corners: bool, scale: float | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    x = aten.clamp_min.default(_source(size, out, align_corners, scale, device), 0.0)
    low = aten.clamp_max.default(aten._to_copy.default(x, dtype=torch.int64), size - 1)
    high = aten.clamp_max.default(aten.add.Scalar(low, 1), size - 1)
    fraction = aten.sub.Tensor(x, aten._to_copy.default(low, dtype=F64))
    return columns(low, high), columns(aten.rsub.Scalar(fraction, 1.0), fraction)


def _cubic_rows(
    size: int, out: int, align_corners: bool, scale: float | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    x = _source(size, out, align_corners, scale, device)
    floor = aten.floor.default(x)
    t = aten.sub.Tensor(x, floor)
    low = aten._to_copy.default(floor, dtype=torch.int64)
    taps = [aten.clamp.default(aten.add.Scalar(low, k), 0, size - 1) for k in range(-1, 3)]
    a = -0.75  # ATen's cubic convolution coefficient

    def near(v: torch.Tensor) -> torch.Tensor:  # |v| <= 1: ((a + 2) v - (a + 3)) v^2 + 1
        inner = aten.sub.Scalar(aten.mul.Scalar(v, a + 2), a + 3)
        return aten.add.Scalar(aten.mul.Tensor(aten.mul.Tensor(inner, v), v), 1)

    def far(v: torch.Tensor) -> torch.Tensor:  # 1 < |v| < 2: ((a v - 5a) v + 8a) v - 4a
        inner = aten.add.Scalar(
            aten.mul.Tensor(aten.sub.Scalar(aten.mul.Scalar(v, a), 5 * a), v), 8 * a
        )
        return aten.sub.Scalar(aten.mul.Tensor(inner, v), 4 * a)

    weights = [
        far(aten.add.Scalar(t, 1)),
        near(t),
        near(aten.rsub.Scalar(t, 1)),
        far(aten.rsub.Scalar(t, 2)),
    ]
    return columns(*taps), columns(*weights)


def _nearest_rows(
    size: int, out: int, scale: float | None, exact: bool, device: torch.device
) -> torch.Tensor:
    ratio = 1.0 / scale if scale else size / out
    shift = 0.5 if exact else 0.0
    o = positions(out, device, F64)
    source = aten.floor.default(aten.mul.Scalar(aten.add.Scalar(o, shift), ratio))
    index = aten.clamp_max.default(aten._to_copy.default(source, dtype=torch.int64), size - 1)
    return columns(index)


def _nearest(exact: bool) -> Callable[..., torch.Tensor]:
    def decomposition(
        x: torch.Tensor, output_size: Sequence[int], *scales: float | None
    ) -> torch.Tensor:
        first = x.dim() - len(output_size)
        result = x
        for i, out in enumerate(output_size):
            scale = scales[i] if i < len(scales) else None
            table = _nearest_rows(x.shape[first + i], out, scale, exact, x.device)
            result = aten.squeeze.dim(take_along(result, first + i, table), first + i + 1)
        return result

    return decomposition


for _dims in ("1d", "2d", "3d"):
    to_prims(f"aten::upsample_nearest{_dims}.default")(_nearest(False))
    to_prims(f"aten::_upsample_nearest_exact{_dims}.default")(_nearest(True))


def _interpolating(cubic: bool) -> Callable[..., torch.Tensor]:
    def decomposition(
        x: torch.Tensor,
        output_size: Sequence[int],
        align_corners: bool,
        *scales: float | None,
    ) -> torch.Tensor:
        make = _cubic_rows if cubic else _linear_rows
        first = x.dim() - len(output_size)
        result = x
        for i, out in enumerate(output_size):
            scale = scales[i] if i < len(scales) else None
            table, weights = make(x.shape[first + i], out, align_corners, scale, x.device)
            result = combine_along(result, first + i, table, weights)
        return result

    return decomposition


to_prims("aten::upsample_linear1d.default")(_interpolating(False))
to_prims("aten::upsample_bilinear2d.default")(_interpolating(False))
to_prims("aten::upsample_trilinear3d.default")(_interpolating(False))
to_prims("aten::upsample_bicubic2d.default")(_interpolating(True))


def _padding(mirror: bool) -> Callable[[torch.Tensor, Sequence[int]], torch.Tensor]:
    def decomposition(x: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
        result = x
        for i in range(len(padding) // 2):  # padding pairs run from the last dim backwards
            dim = x.dim() - 1 - i
            before, after = padding[2 * i], padding[2 * i + 1]
            size = x.shape[dim]
            o = aten.sub.Scalar(positions(size + before + after, x.device), before)
            if mirror:  # reflect about the edges: fold |o| into one period 2 (size - 1)
                period = max(2 * (size - 1), 1)
                k = aten.remainder.Scalar(aten.abs.default(o), period)
                index = aten.where.self(aten.lt.Scalar(k, size), k, aten.rsub.Scalar(k, period))
            else:
                index = aten.clamp.default(o, 0, size - 1)
            result = aten.squeeze.dim(take_along(result, dim, columns(index)), dim + 1)
        return result

    return decomposition


for _dims in ("1d", "2d", "3d"):
    to_prims(f"aten::reflection_pad{_dims}.default")(_padding(True))
    to_prims(f"aten::replication_pad{_dims}.default")(_padding(False))
