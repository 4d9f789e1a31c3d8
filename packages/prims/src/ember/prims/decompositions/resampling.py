"""ATen resampling written with static gather tables: every output position along a dim reads
a few input positions (known from the sizes alone) with fixed weights. Nearest, linear,
bilinear, trilinear and bicubic upsampling, and reflection and replication padding.

`take_along` and `combine_along` are the two building blocks (pooling.py uses them too); the
tables become int64/float constants of the Graph, and each dim is one gather and one sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten

Table = list[list[int]]


def take_along(x: torch.Tensor, dim: int, table: Table) -> torch.Tensor:
    """x with `dim` replaced by two dims [len(table), K]: out[.., o, k, ..] = x[.., table[o][k], ..]."""
    width = len(table[0])
    flat = torch.tensor([i for row in table for i in row], dtype=torch.int64, device=x.device)
    picked = aten.index_select.default(x, dim, flat)
    return aten.reshape.default(picked, [*x.shape[:dim], len(table), width, *x.shape[dim + 1 :]])


def combine_along(
    x: torch.Tensor, dim: int, table: Table, weights: list[list[float]]
) -> torch.Tensor:
    """out[.., o, ..] = sum over k of weights[o][k] * x[.., table[o][k], ..]."""
    picked = take_along(x, dim, table)
    shape = [1] * dim + [len(table), len(table[0])] + [1] * (x.dim() - dim - 1)
    factors = torch.tensor(weights, dtype=x.dtype, device=x.device).reshape(shape)
    return aten.sum.dim_IntList(aten.mul.Tensor(picked, factors), [dim + 1])


def _source(o: int, size: int, out: int, align_corners: bool, scale: float | None) -> float:
    """The input coordinate of output position o (ATen's area_pixel_compute_source_index)."""
    if align_corners:
        return o * (size - 1) / (out - 1) if out > 1 else 0.0
    ratio = 1.0 / scale if scale else size / out
    return (o + 0.5) * ratio - 0.5


def _linear_rows(
    size: int, out: int, align_corners: bool, scale: float | None
) -> tuple[Table, list[list[float]]]:
    table, weights = [], []
    for o in range(out):
        x = max(_source(o, size, out, align_corners, scale), 0.0)
        low = min(int(x), size - 1)
        high = min(low + 1, size - 1)
        fraction = x - low
        table.append([low, high])
        weights.append([1.0 - fraction, fraction])
    return table, weights


def _cubic_weights(t: float, a: float = -0.75) -> list[float]:
    def near(x: float) -> float:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: float) -> float:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _cubic_rows(
    size: int, out: int, align_corners: bool, scale: float | None
) -> tuple[Table, list[list[float]]]:
    table, weights = [], []
    for o in range(out):
        x = _source(o, size, out, align_corners, scale)
        low = math.floor(x)
        table.append([min(max(low + k, 0), size - 1) for k in range(-1, 3)])
        weights.append(_cubic_weights(x - low))
    return table, weights


def _nearest_rows(size: int, out: int, scale: float | None, exact: bool) -> Table:
    ratio = 1.0 / scale if scale else size / out
    shift = 0.5 if exact else 0.0
    return [[min(math.floor((o + shift) * ratio), size - 1)] for o in range(out)]


def _scales(scales: Sequence[float | None] | None, count: int) -> list[float | None]:
    return list(scales) if scales else [None] * count


def _separable(
    x: torch.Tensor,
    output_size: Sequence[int],
    rows: Callable[[int, int, float | None], tuple[Table, list[list[float]]]],
    scales: list[float | None],
) -> torch.Tensor:
    first = x.dim() - len(output_size)
    result = x
    for i, out in enumerate(output_size):
        dim = first + i
        table, weights = rows(x.shape[dim], out, scales[i])
        result = combine_along(result, dim, table, weights)
    return result


def _nearest(exact: bool) -> Callable[..., torch.Tensor]:
    def decomposition(
        x: torch.Tensor, output_size: Sequence[int], *scales: float | None
    ) -> torch.Tensor:
        first = x.dim() - len(output_size)
        result = x
        for i, out in enumerate(output_size):
            scale = scales[i] if i < len(scales) else None
            table = _nearest_rows(x.shape[first + i], out, scale, exact)
            result = aten.squeeze.dim(take_along(result, first + i, table), first + i + 1)
        return result

    return decomposition


for _dims in ("1d", "2d", "3d"):
    to_prims(f"aten::upsample_nearest{_dims}.default")(_nearest(False))
    to_prims(f"aten::_upsample_nearest_exact{_dims}.default")(_nearest(True))


def _interpolating(
    cubic: bool,
) -> Callable[..., torch.Tensor]:
    def decomposition(
        x: torch.Tensor,
        output_size: Sequence[int],
        align_corners: bool,
        *scales: float | None,
    ) -> torch.Tensor:
        make = _cubic_rows if cubic else _linear_rows
        factors = [scales[i] if i < len(scales) else None for i in range(len(output_size))]
        return _separable(
            x, output_size, lambda size, out, scale: make(size, out, align_corners, scale), factors
        )

    return decomposition


to_prims("aten::upsample_linear1d.default")(_interpolating(False))
to_prims("aten::upsample_bilinear2d.default")(_interpolating(False))
to_prims("aten::upsample_trilinear3d.default")(_interpolating(False))
to_prims("aten::upsample_bicubic2d.default")(_interpolating(True))


def _padding(mirror: bool) -> Callable[[torch.Tensor, Sequence[int]], torch.Tensor]:
    def decomposition(x: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
        result = x
        count = len(padding) // 2
        for i in range(count):  # padding pairs run from the last dim backwards
            dim = x.dim() - 1 - i
            before, after = padding[2 * i], padding[2 * i + 1]
            size = x.shape[dim]
            table = []
            for o in range(-before, size + after):
                if mirror:
                    period = 2 * (size - 1)
                    k = abs(o) % period if period else 0
                    table.append([k if k < size else period - k])
                else:
                    table.append([min(max(o, 0), size - 1)])
            result = aten.squeeze.dim(take_along(result, dim, table), dim + 1)
        return result

    return decomposition


for _dims in ("1d", "2d", "3d"):
    to_prims(f"aten::reflection_pad{_dims}.default")(_padding(True))
    to_prims(f"aten::replication_pad{_dims}.default")(_padding(False))
