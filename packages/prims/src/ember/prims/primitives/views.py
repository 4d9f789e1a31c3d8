"""Shape prims: views (broadcast, view, permute, slice, squeeze, unsqueeze, as_strided) and
the copying shape ops (reshape, flip, pad, cat, clone) plus the one mutating prim, copy_to.

View prims return a tensor sharing the operand's memory, with the strides torch gives the
same view; copying prims return new contiguous tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ember.prims.primitives.prim import define

FAMILY = "views"


def _broadcast_in_dim(a: torch.Tensor, shape: Sequence[int], dims: Sequence[int]) -> torch.Tensor:
    if len(dims) != a.dim() or list(dims) != sorted(dims) or len(set(dims)) != len(dims):
        raise ValueError(f"broadcast_in_dim: dims {list(dims)} must be {a.dim()} increasing dims")
    view_shape = [1] * len(shape)
    for source, target in enumerate(dims):
        if a.shape[source] not in (1, shape[target]):
            raise ValueError(
                f"broadcast_in_dim: size {a.shape[source]} cannot become {shape[target]}"
            )
        view_shape[target] = a.shape[source]
    return a.reshape(view_shape).expand(list(shape)) if a.dim() else a.expand(list(shape))


define(
    "broadcast_in_dim",
    "(Tensor a, SymInt[] shape, int[] broadcast_dimensions) -> Tensor",
    _broadcast_in_dim,
    _broadcast_in_dim,
    family=FAMILY,
    doc="view of a with shape `shape`: operand dim i becomes result dim broadcast_dimensions[i] "
    "(increasing); its size is equal or 1 (stride 0); the other result dims have stride 0",
)


def _view(a: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    return a.view(list(shape))


define(
    "view",
    "(Tensor a, SymInt[] shape) -> Tensor",
    _view,
    _view,
    family=FAMILY,
    doc="view of a with a new shape of the same number of elements, in row-major order; "
    "only valid where torch.Tensor.view is (no copy is ever made)",
)


def _reshape_meta(a: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    return torch.empty(a.reshape(list(shape)).shape, dtype=a.dtype, device="meta")


define(
    "reshape",
    "(Tensor a, SymInt[] shape) -> Tensor",
    _reshape_meta,
    lambda a, shape: a.reshape(list(shape)).clone(memory_format=torch.contiguous_format),
    family=FAMILY,
    doc="new contiguous tensor holding a's elements in row-major order with a new shape",
)


def _permute(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    return a.permute(list(dims))


define(
    "permute",
    "(Tensor a, int[] dims) -> Tensor",
    _permute,
    _permute,
    family=FAMILY,
    doc="view whose dim i is a's dim dims[i]",
)


def _slice(
    a: torch.Tensor,
    start: Sequence[int],
    limit: Sequence[int],
    strides: Sequence[int] | None = None,
) -> torch.Tensor:
    steps = list(strides) if strides is not None else [1] * a.dim()
    if not len(start) == len(limit) == len(steps) == a.dim():
        raise ValueError("slice: start, limit and strides need one entry per dim")
    for size, lo, hi, step in zip(a.shape, start, limit, steps):
        if not (0 <= lo <= hi <= size) or step < 1:
            raise ValueError(f"slice: [{lo}:{hi}:{step}] is out of range for size {size}")
    return a[tuple(slice(lo, hi, step) for lo, hi, step in zip(start, limit, steps))]


define(
    "slice",
    "(Tensor a, SymInt[] start_indices, SymInt[] limit_indices, int[]? strides=None) -> Tensor",
    _slice,
    _slice,
    family=FAMILY,
    doc="view of a[start:limit:stride] in every dim; 0 <= start <= limit <= size, stride >= 1",
)


def _squeeze(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    for dim in dims:
        if a.shape[dim] != 1:
            raise ValueError(f"squeeze: dim {dim} has size {a.shape[dim]}, not 1")
    return a.squeeze(tuple(dims)) if dims else a.view(a.shape)


define(
    "squeeze",
    "(Tensor a, int[] dims) -> Tensor",
    _squeeze,
    _squeeze,
    family=FAMILY,
    doc="view of a without the listed dims, each of size 1",
)


def _unsqueeze(a: torch.Tensor, dim: int) -> torch.Tensor:
    return a.unsqueeze(dim)


define(
    "unsqueeze",
    "(Tensor a, int dim) -> Tensor",
    _unsqueeze,
    _unsqueeze,
    family=FAMILY,
    doc="view of a with a new dim of size 1 at position dim (0 <= dim <= a.ndim)",
)


def _as_strided(
    a: torch.Tensor, shape: Sequence[int], strides: Sequence[int], offset: int
) -> torch.Tensor:
    return a.as_strided(list(shape), list(strides), a.storage_offset() + offset)


define(
    "as_strided",
    "(Tensor a, SymInt[] shape, SymInt[] strides, SymInt offset) -> Tensor",
    _as_strided,
    _as_strided,
    family=FAMILY,
    doc="view of a's memory: element idx is at a's first element + offset + "
    "sum(idx[i] * strides[i]) elements; the caller keeps every element in a's memory",
)


define(
    "flip",
    "(Tensor a, int[] dims) -> Tensor",
    lambda a, dims: torch.empty(a.shape, dtype=a.dtype, device="meta"),
    lambda a, dims: torch.flip(a, list(dims)).contiguous(),
    family=FAMILY,
    doc="new tensor with the order of elements reversed along each listed dim",
)


def _pad_shape(
    a: torch.Tensor, low: Sequence[int], high: Sequence[int], interior: Sequence[int]
) -> list[int]:
    shape = []
    for size, lo, hi, inner in zip(a.shape, low, high, interior):
        stretched = size + max(size - 1, 0) * inner
        shape.append(stretched + lo + hi)
        if shape[-1] < 0 or inner < 0:
            raise ValueError("pad: a negative size results")
    return shape


def _pad_impl(
    a: torch.Tensor, value: float, low: Sequence[int], high: Sequence[int], interior: Sequence[int]
) -> torch.Tensor:
    stretched_shape = [s + max(s - 1, 0) * i for s, i in zip(a.shape, interior)]
    stretched = torch.full(stretched_shape, value, dtype=a.dtype, device=a.device)
    stretched[tuple(slice(None, None, i + 1) for i in interior)] = a
    out = torch.full(_pad_shape(a, low, high, interior), value, dtype=a.dtype, device=a.device)
    src, dst = [], []
    for size, lo, hi in zip(stretched_shape, low, high):
        src.append(slice(max(-lo, 0), size - max(-hi, 0)))
        dst.append(slice(max(lo, 0), max(lo, 0) + max(size - max(-lo, 0) - max(-hi, 0), 0)))
    out[tuple(dst)] = stretched[tuple(src)]
    return out


define(
    "pad",
    "(Tensor a, Scalar value, SymInt[] low, SymInt[] high, SymInt[] interior) -> Tensor",
    lambda a, value, low, high, interior: torch.empty(
        _pad_shape(a, low, high, interior), dtype=a.dtype, device="meta"
    ),
    _pad_impl,
    family=FAMILY,
    doc="new tensor: in each dim, `interior` copies of value between elements, then `low` "
    "before and `high` after (negative low/high crop instead); filled with value",
)


def _cat_meta(tensors: Sequence[torch.Tensor], dim: int) -> torch.Tensor:
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise TypeError(f"cat: operands of several dtypes {sorted(map(str, dtypes))}")
    return torch.empty(torch.cat(list(tensors), dim).shape, dtype=tensors[0].dtype, device="meta")


define(
    "cat",
    "(Tensor[] tensors, int dim) -> Tensor",
    _cat_meta,
    lambda tensors, dim: torch.cat(list(tensors), dim).contiguous(),
    family=FAMILY,
    doc="new tensor joining tensors (one dtype, equal sizes but in dim) along dim",
)

define(
    "clone",
    "(Tensor a) -> Tensor",
    lambda a: torch.empty(a.shape, dtype=a.dtype, device="meta"),
    lambda a: a.clone(memory_format=torch.contiguous_format),
    family=FAMILY,
    doc="new contiguous tensor with a's values",
)


def _copy_to_meta(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    if dst.shape != src.shape or dst.dtype != src.dtype:
        raise ValueError("copy_to: src must have dst's shape and dtype")
    return dst


define(
    "copy_to",
    "(Tensor(a!) dst, Tensor src) -> Tensor(a!)",
    _copy_to_meta,
    lambda dst, src: dst.copy_(src),
    family=FAMILY,
    doc="writes src's values into dst's memory (same shape and dtype) and returns dst; the "
    "only prim that mutates",
)
