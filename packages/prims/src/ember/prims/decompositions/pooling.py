"""ATen pooling. 2-d max and average pooling are written with prims: windows are strided
views (`as_strided`) of the padded input; max pooling searches each window with a chain of
selects over its elements (large windows: amax/argmax), its indices pointing into each input
plane, and its backward gathers each input's gradient from the windows that chose it (large
windows: a scatter through the indices); average pooling sums. Adaptive, 3-d and unpooling ops and im2col gather their windows through
static tables (see resampling.py) with other ATen ops, expanded by later rounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.operands import scalar_like
from ember.prims.decompositions.resampling import combine_along, take_along
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims

aten = torch.ops.aten


def _per_dim(
    values: Sequence[int] | int, rank: int, default: Sequence[int] | None = None
) -> list[int]:
    """A pooling argument (`kernel_size=3`, `stride=[2]`, `stride=[]`) as one int per dim."""
    if isinstance(values, int):
        return [values] * rank
    if len(values) == 0 and default is not None:
        return list(default)
    return list(values) * rank if len(values) == 1 else list(values)


def _pair(values: Sequence[int] | int, default: Sequence[int] | None = None) -> list[int]:
    return _per_dim(values, 2, default)


def _triple(values: Sequence[int] | int, default: Sequence[int] | None = None) -> list[int]:
    return _per_dim(values, 3, default)


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
    clamp: bool = False,
) -> tuple[torch.Tensor, list[int]]:
    """[N, C, oh, ow, kh * kw] windows of x (4-d) padded with value; `clamp` (average pooling)
    cuts windows to the padded input."""
    n, c, h, w = x.shape
    out = [_out_size(size, k[i], s[i], p[i], d[i], ceil_mode) for i, size in enumerate((h, w))]
    if clamp:
        # a window never needs to reach past the padded input (size + 2p): what lies beyond is
        # padding no average counts (EfficientNet pools 7x7 maps with a 1280-wide kernel)
        k = [min(k[i], size + 2 * p[i]) for i, size in enumerate((h, w))]
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


# Windows of at most this many elements are searched by a chain of selects over their elements
# (each output a SIMD lane), and gradients gathered by each input from at most this many
# windows; larger ones reduce with amax/argmax and scatter (torch.compile's limit too).
_UNROLLED_WINDOW = 25


def _unrolled(window: int, device: torch.device) -> bool:
    """Whether a window of `window` elements is searched (and its gradient gathered) element
    by element: on the CPU, where each output is a SIMD lane of the C++ loop. On the GPU the
    window reduction and the scatter stay: inductor's Triton kernels inlined the pooled map
    (ResNet-50's stem: its batch norm and ReLU) into every window element of the chain and
    took 1.32 ms on the H100 where the reduction over a stored map takes a tenth of it."""
    return window <= _UNROLLED_WINDOW and device.type == "cpu"


def _first_in_input(out: int, s: int, p: int, d: int, device: torch.device) -> torch.Tensor | None:
    """The first window offset along a dim that lies inside the input, for each output
    (None where every window starts inside): where eager's window search starts."""
    if p == 0:
        return None
    before = prims.iota(out, p, -s, dtype=torch.int64, device=device)
    before = prims.maximum(before, scalar_like(0, before))
    return prims.div(prims.add(before, scalar_like(d - 1, before)), scalar_like(d, before))


def _window_search(
    x: torch.Tensor, k: list[int], s: list[int], p: list[int], d: list[int], ceil_mode: bool
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Each window's maximum and its offset as eager's kernel finds them: the elements in
    order, one taken when greater than the maximum so far or NaN, from -inf at the first
    element inside the input. So the offset is the last NaN's, else the first element equal
    to the maximum, else (all -inf) the first inside. Select chains over the elements, each
    output a SIMD lane of the C++ and Triton loops, each select's mask read once (a mask two
    chains share was stored: ResNet's stem wrote 18 byte masks an output); a reduction along
    the window left GCC with a scalar loop (its NaN-aware select)."""
    n, c, h, w = x.shape
    out = [_out_size(size, k[i], s[i], p[i], d[i], ceil_mode) for i, size in enumerate((h, w))]
    high = [
        max((out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - (size + p[i]), 0)
        for i, size in enumerate((h, w))
    ]
    padded = prims.pad(x, -math.inf, [0, 0, p[0], p[1]], [0, 0, high[0], high[1]], [0, 0, 0, 0])
    hp, wp = padded.shape[2], padded.shape[3]
    shape = [n, c, out[0], out[1]]
    strides = [c * hp * wp, hp * wp, s[0] * wp, s[1]]
    elements = [
        prims.as_strided(padded, shape, strides, ki * d[0] * wp + kj * d[1])
        for ki in range(k[0])
        for kj in range(k[1])
    ]
    best = elements[0]  # -inf (padding or not) is the maximum of no element
    for element in elements[1:]:
        # greater, or NaN: two selects, not one on the two masks' `|`, which GCC 12 did not
        # vectorize where the elements are selects too (a ReLU before the pool)
        greater = prims.where(prims.gt(element, best), element, best)
        best = prims.where(prims.isnan(element), element, greater)
    offset = prims.full(shape, len(elements) - 1, dtype=torch.int64, device=x.device)
    for position in reversed(range(len(elements) - 1)):  # the first equal to the maximum
        here = scalar_like(position, offset)
        offset = prims.where(prims.eq(elements[position], best), here, offset)
    first = [_first_in_input(out[i], s[i], p[i], d[i], x.device) for i in range(2)]
    if first[0] is not None or first[1] is not None:  # all -inf: the first inside
        inside = prims.full(shape, 0, dtype=torch.int64, device=x.device)
        if first[0] is not None:
            row = prims.broadcast_in_dim(first[0], shape, [2])
            inside = prims.add(inside, prims.mul(row, scalar_like(k[1], row)))
        if first[1] is not None:
            inside = prims.add(inside, prims.broadcast_in_dim(first[1], shape, [3]))
        offset = prims.where(prims.eq(best, scalar_like(-math.inf, best)), inside, offset)
    for position, element in enumerate(elements):  # the last NaN
        here = scalar_like(position, offset)
        offset = prims.where(prims.isnan(element), here, offset)
    return best, offset, out


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
    if _unrolled(k[0] * k[1], x.device):
        values, local, out = _window_search(xb, k, s, p, d, ceil_mode)
    else:
        windows, out = _windows(xb, -math.inf, k, s, p, d, ceil_mode)
        values = prims.amax(windows, [4])
        local = prims.argmax(windows, 4)
    if k[0] * k[1] <= 127:
        # the window offset passes through int8, as torch.compile's low-memory pooling keeps
        # it: a training Graph that saves it for the backward saves 1 byte an output, not the
        # 8 of the flat index it computes again (ResNet-50's stem: 6 MB instead of 51 MB)
        local = prims.convert_element_type(prims.convert_element_type(local, torch.int8),
                                           torch.int64)  # fmt: skip
    # the offset is never negative: truncating division, and the column without a remainder
    # (its C++ select beside the gather's masks left GCC with a scalar loop)
    ki = prims.div(local, scalar_like(k[1], local))
    kj = prims.sub(local, prims.mul(ki, scalar_like(k[1], ki)))
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


def _candidates(size: int, out: int, k: int, s: int, d: int, p: int) -> tuple[int, int]:
    """How many windows along a dim may hold an input element (j), and the number of
    stride-long blocks (q) the padded input is cut into: element q * s + r - p lies in the
    windows q - j for j < that count."""
    return -(-(d * (k - 1) + 1) // s), -(-(size + p) // s)


def _shifted(x: torch.Tensor, fill: float, a: int, b: int, qh: int, qw: int) -> torch.Tensor:
    """[N, C, qh, qw]: x[..., q - a, r - b], `fill` where that lies outside x."""
    n, c, oh, ow = x.shape
    padded = prims.pad(x, fill, [0, 0, a, b], [0, 0, max(qh - a - oh, 0), max(qw - b - ow, 0)],
                       [0, 0, 0, 0])  # fmt: skip
    return prims.slice(padded, [0, 0, 0, 0], [n, c, qh, qw])


def _gather_gradient(
    grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor,
    k: list[int], s: list[int], p: list[int], d: list[int],
) -> torch.Tensor:  # fmt: skip
    """Max pooling's input gradient gathered by each input element from the windows that
    may hold it (those whose index names it), in the windows' order: the sums eager's
    scatter makes, added in the same order, with no scatter and no zeroed buffer first."""
    n, c, h, w = x.shape
    out = [grad.shape[2], grad.shape[3]]
    (jh, qh), (jw, qw) = (_candidates(size, out[i], k[i], s[i], d[i], p[i])
                          for i, size in enumerate((h, w)))  # fmt: skip
    qh, qw = max(qh, out[0]), max(qw, out[1])
    blocks = [n, c, qh, s[0], qw, s[1]]
    rows = prims.iota(qh * s[0], -p[0], 1, dtype=torch.int64, device=x.device)
    cols = prims.iota(qw * s[1], -p[1], 1, dtype=torch.int64, device=x.device)
    rows = prims.broadcast_in_dim(prims.reshape(rows, [qh, s[0]]), blocks, [2, 3])
    cols = prims.broadcast_in_dim(prims.reshape(cols, [qw, s[1]]), blocks, [4, 5])
    position = prims.add(prims.mul(rows, scalar_like(w, rows)), cols)
    total = prims.full(blocks, 0, dtype=grad.dtype, device=grad.device)
    for a in reversed(range(jh)):  # windows in eager's order: rows, then columns, ascending
        for b in reversed(range(jw)):
            # window q - a of each block q: a pad of its own for each (a, b) (one padded
            # index shared by the windows, a view, was stored NCHW in channels-last models;
            # shared now are the indices, stored as the layout pass places them)
            window_index = _shifted(indices, -1, a, b, qh, qw)
            window_grad = _shifted(grad, 0.0, a, b, qh, qw)
            chose = prims.eq(prims.broadcast_in_dim(window_index, blocks, [0, 1, 2, 4]), position)
            taken = prims.broadcast_in_dim(window_grad, blocks, [0, 1, 2, 4])
            total = prims.add(total, prims.where(chose, taken, scalar_like(0, taken)))
    plane = prims.reshape(total, [n, c, qh * s[0], qw * s[1]])
    return prims.slice(plane, [0, 0, p[0], p[1]], [n, c, p[0] + h, p[1] + w])


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
    k = _pair(kernel_size)
    s, p, d = _pair(stride, k), _pair(padding), _pair(dilation)
    n, c, h, w = xb.shape
    (jh, _), (jw, _) = (_candidates(size, gb.shape[2 + i], k[i], s[i], d[i], p[i])
                        for i, size in enumerate((h, w)))  # fmt: skip
    if _unrolled(jh * jw, grad.device):
        result = _gather_gradient(gb, xb, ib, k, s, p, d)
    else:
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
    windows, _ = _windows(xb, 0.0, k, s, p, d, ceil_mode, clamp=True)
    total = prims.sum(windows, [4])
    if divisor_override:
        result = prims.div(total, scalar_like(divisor_override, total))
    else:
        h, w = xb.shape[2], xb.shape[3]
        ones = prims.full([1, 1, h, w], 1, dtype=x.dtype, device=x.device)
        if count_include_pad:
            ones = prims.pad(ones, 1.0, [0, 0, p[0], p[1]], [0, 0, p[0], p[1]], [0, 0, 0, 0])
            counted, _ = _windows(ones, 0.0, k, s, [0, 0], d, ceil_mode, clamp=True)
        else:
            counted, _ = _windows(ones, 0.0, k, s, p, d, ceil_mode, clamp=True)
        counts = prims.broadcast_in_dim(prims.sum(counted, [4]), list(total.shape), [0, 1, 2, 3])
        result = prims.div(total, counts)
    return prims.squeeze(result, [0]) if x.dim() == 3 else result


# ---- N-d pooling through window tables --------------------------------------------------
# Each output position o of a pooled plane reads the input positions table[o, k] (flat indices
# into the plane); `valid` marks the real ones (windows are padded to one width K). Tables are
# computed in the Graph from arange, per dim, then combined over the dims.

WindowTable = tuple[torch.Tensor, torch.Tensor]  # int64 [O, K] positions, bool [O, K] valid


def _product_table(per_dim: list[WindowTable], sizes: Sequence[int]) -> WindowTable:
    """The window table of a plane from the tables of its dims (row-major flat positions)."""
    n = len(per_dim)
    outs = [rows.shape[0] for rows, _ in per_dim]
    widths = [rows.shape[1] for rows, _ in per_dim]
    shape = [*outs, *widths]
    flat: torch.Tensor | None = None
    valid: torch.Tensor | None = None
    stride = math.prod(sizes)
    for d, (rows, ok) in enumerate(per_dim):
        stride //= sizes[d]
        place = [1] * (2 * n)
        place[d], place[n + d] = outs[d], widths[d]
        spread = aten.expand.default(aten.reshape.default(rows, place), shape)
        spread_ok = aten.expand.default(aten.reshape.default(ok, place), shape)
        term = aten.mul.Scalar(spread, stride)
        flat = term if flat is None else aten.add.Tensor(flat, term)
        valid = spread_ok if valid is None else aten.logical_and.default(valid, spread_ok)
    assert flat is not None and valid is not None
    o, k = math.prod(outs), math.prod(widths)
    return aten.reshape.default(flat, [o, k]), aten.reshape.default(valid, [o, k])


def _adaptive_rows(size: int, out: int, device: torch.device) -> WindowTable:
    """Output o averages input [floor(o * size / out), ceil((o + 1) * size / out))."""
    width = max(-((-(o + 1) * size) // out) - (o * size) // out for o in range(out))
    o = aten.arange.default(out, device=device)
    starts = aten.floor_divide.Scalar(aten.mul.Scalar(o, size), out)
    ends = aten.floor_divide.Scalar(aten.add.Scalar(aten.mul.Scalar(o, size), size + out - 1), out)
    k = aten.arange.default(width, device=device)
    wanted = aten.add.Tensor(aten.unsqueeze.default(starts, 1), k)
    last = aten.unsqueeze.default(aten.sub.Scalar(ends, 1), 1)
    return aten.minimum.default(wanted, last), aten.le.Tensor(wanted, last)


def _pool_rows(
    size: int, k: int, s: int, p: int, d: int, ceil_mode: bool, device: torch.device
) -> WindowTable:
    out = _out_size(size, k, s, p, d, ceil_mode)
    o = aten.arange.default(out, device=device)
    j = aten.arange.default(k, device=device)
    start = aten.sub.Scalar(aten.mul.Scalar(o, s), p)
    wanted = aten.add.Tensor(aten.unsqueeze.default(start, 1), aten.mul.Scalar(j, d))
    ok = aten.logical_and.default(aten.ge.Scalar(wanted, 0), aten.lt.Scalar(wanted, size))
    return aten.clamp.default(wanted, 0, size - 1), ok


def _plane(x: torch.Tensor, spatial: int) -> tuple[torch.Tensor, list[int], list[int]]:
    """x as [batch..., P] (the last `spatial` dims flattened), its lead dims and plane sizes."""
    lead, sizes = list(x.shape[: x.dim() - spatial]), list(x.shape[x.dim() - spatial :])
    return aten.reshape.default(x, [*lead, math.prod(sizes)]), lead, sizes


def _pool_windows(
    x: torch.Tensor, spatial: int, per_dim: list[WindowTable], fill: float
) -> tuple[torch.Tensor, torch.Tensor, list[int], list[int]]:
    """[batch..., O, K] window values (invalid ones = fill), the table, lead dims, out sizes."""
    flat, lead, sizes = _plane(x, spatial)
    table, valid = _product_table(per_dim, sizes)
    windows = take_along(flat, flat.dim() - 1, table)
    windows = aten.where.self(valid, windows, aten.full_like.default(windows, fill))
    return windows, table, lead, [rows.shape[0] for rows, _ in per_dim]


def _max_with_indices(
    x: torch.Tensor, spatial: int, per_dim: list[WindowTable]
) -> tuple[torch.Tensor, torch.Tensor]:
    windows, table, lead, out = _pool_windows(x, spatial, per_dim, -math.inf)
    values, position = aten.max.dim(windows, -1)
    table = aten.expand.default(table, list(windows.shape))
    indices = aten.squeeze.dim(
        aten.gather.default(table, -1, aten.unsqueeze.default(position, -1)), -1
    )
    return aten.reshape.default(values, [*lead, *out]), aten.reshape.default(indices, [*lead, *out])


def _adaptive_max(spatial: int) -> Any:
    def decomposition(
        x: torch.Tensor, output_size: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        sizes = x.shape[x.dim() - spatial :]
        per_dim = [_adaptive_rows(size, out, x.device) for size, out in zip(sizes, output_size)]
        return _max_with_indices(x, spatial, per_dim)

    return decomposition


to_prims("aten::adaptive_max_pool2d.default")(_adaptive_max(2))
to_prims("aten::adaptive_max_pool3d.default")(_adaptive_max(3))


def _adaptive_avg(spatial: int) -> Any:
    def decomposition(x: torch.Tensor, output_size: Sequence[int]) -> torch.Tensor:
        result = x
        first = x.dim() - spatial
        for i, out in enumerate(output_size):
            rows, ok = _adaptive_rows(x.shape[first + i], out, x.device)
            ones = aten._to_copy.default(ok, dtype=torch.float64)
            weights = aten.div.Tensor(ones, aten.sum.dim_IntList(ones, [1], True))
            result = combine_along(result, first + i, rows, weights)
        return result

    return decomposition


to_prims("aten::_adaptive_avg_pool2d.default")(_adaptive_avg(2))
to_prims("aten::_adaptive_avg_pool3d.default")(_adaptive_avg(3))


@to_prims("aten::max_pool3d_with_indices.default")
def _max_pool3d(
    x: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    k = _triple(kernel_size)
    s, p, d = _triple(stride, k), _triple(padding), _triple(dilation)
    sizes = x.shape[x.dim() - 3 :]
    per_dim = [_pool_rows(sizes[i], k[i], s[i], p[i], d[i], ceil_mode, x.device) for i in range(3)]
    return _max_with_indices(x, 3, per_dim)


@to_prims("aten::avg_pool3d.default")
def _avg_pool3d(
    x: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> torch.Tensor:
    k = _triple(kernel_size)
    s, p = _triple(stride, k), _triple(padding)
    sizes = x.shape[x.dim() - 3 :]
    per_dim = [_pool_rows(sizes[i], k[i], s[i], p[i], 1, ceil_mode, x.device) for i in range(3)]
    windows, _, lead, out = _pool_windows(x, 3, per_dim, 0.0)
    total = aten.sum.dim_IntList(windows, [-1])
    if divisor_override:
        return aten.reshape.default(aten.div.Scalar(total, divisor_override), [*lead, *out])
    counts: torch.Tensor | None = None
    for i in range(3):  # the window sizes per dim (clipped at the padded or real edges)
        start = aten.sub.Scalar(
            aten.mul.Scalar(aten.arange.default(out[i], device=x.device), s[i]), p[i]
        )
        end = aten.clamp_max.default(aten.add.Scalar(start, k[i]), sizes[i] + p[i])
        if not count_include_pad:
            start, end = aten.clamp_min.default(start, 0), aten.clamp_max.default(end, sizes[i])
        place = [1, 1, 1]
        place[i] = out[i]
        size_i = aten.reshape.default(aten.sub.Tensor(end, start), place)
        counts = size_i if counts is None else aten.mul.Tensor(counts, size_i)
    assert counts is not None
    divisor = aten._to_copy.default(aten.reshape.default(counts, [-1]), dtype=x.dtype)
    return aten.reshape.default(aten.div.Tensor(total, divisor), [*lead, *out])


def _max_unpool(x: torch.Tensor, indices: torch.Tensor, output_size: Sequence[int]) -> torch.Tensor:
    spatial = len(output_size)
    flat, lead, _ = _plane(x, spatial)
    flat_indices, _, _ = _plane(indices, spatial)
    zeros = aten.zeros.default([*lead, math.prod(output_size)], dtype=x.dtype, device=x.device)
    written = aten.scatter.src(zeros, flat.dim() - 1, flat_indices, flat)
    return aten.reshape.default(written, [*lead, *output_size])


to_prims("aten::max_unpool2d.default")(_max_unpool)
to_prims("aten::max_unpool3d.default")(
    lambda x, indices, output_size, stride, padding: _max_unpool(x, indices, output_size)
)


@to_prims("aten::im2col.default")
def _im2col(
    x: torch.Tensor,
    kernel_size: Sequence[int],
    dilation: Sequence[int],
    padding: Sequence[int],
    stride: Sequence[int],
) -> torch.Tensor:
    k, d, p, s = _pair(kernel_size), _pair(dilation), _pair(padding), _pair(stride)
    padded = aten.constant_pad_nd.default(x, [p[1], p[1], p[0], p[0]], 0)
    sizes = padded.shape[-2:]
    per_dim = [_pool_rows(sizes[i], k[i], s[i], 0, d[i], False, x.device) for i in range(2)]
    flat, lead, _ = _plane(padded, 2)
    table, _ = _product_table(per_dim, sizes)
    windows = take_along(flat, flat.dim() - 1, table)  # [N, C, L, K]
    moved = aten.transpose.int(windows, -1, -2)  # [N, C, K, L]
    return aten.reshape.default(moved, [*lead[:-1], lead[-1] * k[0] * k[1], table.shape[0]])
