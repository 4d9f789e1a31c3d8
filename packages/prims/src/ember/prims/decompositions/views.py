"""ATen shape and view ops written with view prims (view, permute, slice, broadcast_in_dim,
squeeze, unsqueeze, as_strided) and copying prims (reshape, clone, cat, flip, pad).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import sympy
import torch
from torch.utils._python_dispatch import _disable_current_modes

from ember.prims.decompositions.operands import canonical_dim, convert
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims
from ember.prims.symbolic.layout import view_strides


def infer_shape(shape: Sequence[int], numel: int) -> list[int]:
    """shape with a -1 entry replaced by the size that keeps numel elements."""
    sizes = list(shape)
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = numel // known if known else 0
    return sizes


@to_prims("aten::view.default", "aten::_unsafe_view.default")
def view(a: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    shape = infer_shape(size, a.numel())
    if a.is_contiguous() or _viewable(a, shape):
        return prims.view(a, shape)
    return prims.reshape(a, shape)


def _viewable(a: torch.Tensor, shape: list[int]) -> bool:
    """Whether `a` can be viewed in `shape`. Over symbolic sizes c10's stride computation is
    followed with the shape environment deciding each comparison (a symbolic Graph decomposed
    with copies here ran two extra kernels a GPT-2 attention layer: q and k copied for `bmm`)."""
    symbolic = [n for n in (*a.shape, *a.stride(), *shape) if isinstance(n, torch.SymInt)]
    if symbolic:
        shape_env = symbolic[0].node.shape_env
        sizes, strides, target = (
            [sympy.sympify(shape_env.to_sympy(n)) for n in values]
            for values in (a.shape, a.stride(), shape)
        )
        return view_strides(sizes, strides, target, shape_env.static_value) is not None
    try:
        with _disable_current_modes():
            torch.empty_strided(a.shape, a.stride(), device="meta").view(shape)
    except RuntimeError:
        return False
    return True


@to_prims("aten::reshape.default")
def _reshape(a: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    sizes = infer_shape(shape, a.numel())
    return prims.view(a, sizes) if _viewable(a, sizes) else prims.reshape(a, sizes)


@to_prims("aten::t.default", "aten::numpy_T.default")
def _t(a: torch.Tensor) -> torch.Tensor:
    return prims.permute(a, list(reversed(range(a.dim()))))


@to_prims("aten::transpose.int", "aten::swapaxes.default", "aten::swapdims.default")
def transpose(a: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    if a.dim() == 0:
        return prims.view(a, [])
    order = list(range(a.dim()))
    d0, d1 = canonical_dim(dim0, a.dim()), canonical_dim(dim1, a.dim())
    order[d0], order[d1] = order[d1], order[d0]
    return prims.permute(a, order)


@to_prims("aten::permute.default")
def permute(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    return prims.permute(a, [canonical_dim(d, a.dim()) for d in dims])


@to_prims("aten::movedim.int")
def _movedim(a: torch.Tensor, source: int, destination: int) -> torch.Tensor:
    order = list(range(a.dim()))
    src, dst = canonical_dim(source, a.dim()), canonical_dim(destination, a.dim())
    order.remove(src)
    order.insert(dst, src)
    return prims.permute(a, order)


@to_prims("aten::expand.default")
def expand(a: torch.Tensor, size: Sequence[int], *, implicit: bool = False) -> torch.Tensor:
    shape = list(size)
    offset = len(shape) - a.dim()
    for i in range(a.dim()):
        if shape[offset + i] == -1:
            shape[offset + i] = a.shape[i]
    return prims.broadcast_in_dim(a, shape, list(range(offset, len(shape))))


@to_prims("aten::expand_as.default")
def _expand_as(a: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return expand(a, list(other.shape))


@to_prims("aten::unsqueeze.default")
def unsqueeze(a: torch.Tensor, dim: int) -> torch.Tensor:
    return prims.unsqueeze(a, canonical_dim(dim, a.dim() + 1))


@to_prims("aten::squeeze.default", "aten::squeeze.dim", "aten::squeeze.dims")
def squeeze(a: torch.Tensor, dim: Any = None) -> torch.Tensor:
    if a.dim() == 0:
        return prims.view(a, [])
    dims = range(a.dim()) if dim is None else [dim] if isinstance(dim, int) else dim
    wrapped = sorted({canonical_dim(d, a.dim()) for d in dims})
    return prims.squeeze(a, [d for d in wrapped if a.shape[d] == 1])


@to_prims("aten::flatten.using_ints")
def _flatten(a: torch.Tensor, start_dim: int = 0, end_dim: int = -1) -> torch.Tensor:
    if a.dim() == 0:
        return view(a, [1])
    start, end = canonical_dim(start_dim, a.dim()), canonical_dim(end_dim, a.dim())
    shape = [*a.shape[:start], math.prod(a.shape[start : end + 1]), *a.shape[end + 1 :]]
    return _reshape(a, shape)


@to_prims("aten::unflatten.int")
def _unflatten(a: torch.Tensor, dim: int, sizes: Sequence[int]) -> torch.Tensor:
    d = canonical_dim(dim, a.dim())
    inner = infer_shape(sizes, a.shape[d])
    return view(a, [*a.shape[:d], *inner, *a.shape[d + 1 :]])


def slice_dim(a: torch.Tensor, dim: int, start: int, end: int, step: int = 1) -> torch.Tensor:
    """a[start:end:step] along dim, Python slice rules (clamped, negatives wrap)."""
    size = a.shape[dim]
    if any(isinstance(v, torch.SymInt) for v in (start, end, size)):
        lo, hi = _clamped(start, size), _clamped(end, size)
    else:
        lo, hi, _ = slice(start, end, step).indices(size)
    hi = max(hi, lo)
    starts, limits, strides = [0] * a.dim(), list(a.shape), [1] * a.dim()
    starts[dim], limits[dim], strides[dim] = lo, hi, step
    return prims.slice(a, starts, limits, strides if step != 1 else None)


def _clamped(index: int, size: int) -> int:
    """A slice bound over symbolic sizes, as `slice.indices` clamps it: each comparison is
    decided by the size's range and guards where they settle it (`x[:n]` of a 256-row buffer
    when n <= 256 is guarded), else guarded; a bound past any size means the end."""
    if not isinstance(index, torch.SymInt) and index >= _END:
        return size
    if index < 0:
        index = index + size
        return index if index > 0 else 0
    return size if index > size else index


_END = 1 << 62  # torch's "to the end" (sys.maxsize), and anything no size reaches


@to_prims("aten::slice.Tensor")
def _slice(
    a: torch.Tensor, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1
) -> torch.Tensor:
    return slice_dim(
        a,
        canonical_dim(dim, a.dim()),
        start if start is not None else 0,
        end if end is not None else a.shape[canonical_dim(dim, a.dim())],
        step,
    )


@to_prims("aten::narrow.default")
def _narrow(a: torch.Tensor, dim: int, start: int, length: int) -> torch.Tensor:
    d = canonical_dim(dim, a.dim())
    start = start % a.shape[d] if start < 0 else start
    return slice_dim(a, d, start, start + length)


@to_prims("aten::select.int")
def select(a: torch.Tensor, dim: int, index: int) -> torch.Tensor:
    d = canonical_dim(dim, a.dim())
    i = index % a.shape[d]
    return prims.squeeze(slice_dim(a, d, i, i + 1), [d])


@to_prims("aten::split.Tensor")
def _split(a: torch.Tensor, split_size: int, dim: int = 0) -> list[torch.Tensor]:
    d = canonical_dim(dim, a.dim())
    size = a.shape[d]
    if split_size == 0:
        return [slice_dim(a, d, 0, size)]
    count = max(math.ceil(size / split_size), 1)
    return [slice_dim(a, d, i * split_size, min((i + 1) * split_size, size)) for i in range(count)]


@to_prims("aten::split_with_sizes.default")
def split_with_sizes(
    a: torch.Tensor, split_sizes: Sequence[int], dim: int = 0
) -> list[torch.Tensor]:
    d = canonical_dim(dim, a.dim())
    pieces, start = [], 0
    for length in split_sizes:
        pieces.append(slice_dim(a, d, start, start + length))
        start += length
    return pieces


@to_prims("aten::unbind.int")
def _unbind(a: torch.Tensor, dim: int = 0) -> list[torch.Tensor]:
    d = canonical_dim(dim, a.dim())
    return [select(a, d, i) for i in range(a.shape[d])]


@to_prims("aten::chunk.default")
def _chunk(a: torch.Tensor, chunks: int, dim: int = 0) -> list[torch.Tensor]:
    d = canonical_dim(dim, a.dim())
    return _split(a, max(math.ceil(a.shape[d] / chunks), 1) if a.shape[d] else 1, d)


@to_prims("aten::cat.default")
def cat(tensors: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    from ember.prims.decompositions.operands import result_type

    dtype = result_type(*tensors)
    kept = [convert(t, dtype) for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    if not kept:
        return prims.clone(convert(tensors[0], dtype))
    if len(kept) == 1:
        return prims.clone(kept[0])
    return prims.cat(kept, canonical_dim(dim, kept[0].dim()))


@to_prims("aten::stack.default")
def _stack(tensors: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    d = canonical_dim(dim, tensors[0].dim() + 1)
    return cat([prims.unsqueeze(t, d) for t in tensors], d)


@to_prims("aten::hstack.default")
def _hstack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return cat(tensors, 0 if tensors[0].dim() == 1 else 1)


@to_prims("aten::vstack.default")
def _vstack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return cat([view(t, [1, t.shape[0]]) if t.dim() == 1 else t for t in tensors], 0)


@to_prims("aten::clone.default")
def _clone(a: torch.Tensor, *, memory_format: Any = None) -> torch.Tensor:
    return prims.clone(a)


@to_prims("aten::contiguous.default")
def _contiguous(a: torch.Tensor, *, memory_format: Any = None) -> torch.Tensor:
    return prims.clone(a)


@to_prims("aten::lift_fresh_copy.default")
def _lift_fresh_copy(a: torch.Tensor) -> torch.Tensor:
    return prims.clone(a)


@to_prims("aten::_to_copy.default")
def _to_copy(
    a: torch.Tensor,
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
    non_blocking: bool = False,
    memory_format: Any = None,
) -> torch.Tensor:
    if dtype is not None and dtype != a.dtype:
        return prims.convert_element_type(a, dtype)
    return prims.clone(a)


@to_prims("aten::copy.default")
def _copy(a: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    return prims.clone(expand(convert(src, a.dtype), list(a.shape)))


@to_prims("aten::copy_.default")
def _copy_(a: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    value = convert(src, a.dtype)
    if list(value.shape) != list(a.shape):
        value = expand(value, list(a.shape))
    return prims.copy_to(a, value)


@to_prims("aten::flip.default")
def _flip(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    return prims.flip(a, sorted({canonical_dim(d, a.dim()) for d in dims}))


@to_prims("aten::roll.default")
def _roll(a: torch.Tensor, shifts: Sequence[int], dims: Sequence[int] = ()) -> torch.Tensor:
    if not dims:
        flat = prims.reshape(a, [a.numel()])
        return view(_roll(flat, shifts, [0]), list(a.shape))
    result = a
    for shift, dim in zip(shifts, dims):
        d = canonical_dim(dim, a.dim())
        size = a.shape[d]
        if size == 0:
            continue
        s = shift % size
        if s:
            result = cat(
                [slice_dim(result, d, size - s, size), slice_dim(result, d, 0, size - s)], d
            )
    return result if result is not a else prims.clone(a)


@to_prims("aten::repeat.default")
def _repeat(a: torch.Tensor, repeats: Sequence[int]) -> torch.Tensor:
    padded = [1] * (len(repeats) - a.dim()) + list(a.shape)
    base = prims.view(a, padded) if a.is_contiguous() else prims.reshape(a, padded)
    expanded_shape, dims = [], []
    for i, (count, size) in enumerate(zip(repeats, padded)):
        expanded_shape += [count, size]
        dims.append(2 * i + 1)
    expanded = prims.broadcast_in_dim(base, expanded_shape, dims)
    return prims.reshape(expanded, [c * s for c, s in zip(repeats, padded)])


@to_prims("aten::constant_pad_nd.default")
def constant_pad(a: torch.Tensor, pad: Sequence[int], value: Any = 0) -> torch.Tensor:
    low, high = [0] * a.dim(), [0] * a.dim()
    for i in range(len(pad) // 2):
        low[a.dim() - 1 - i] = pad[2 * i]
        high[a.dim() - 1 - i] = pad[2 * i + 1]
    return prims.pad(a, value, low, high, [0] * a.dim())


@to_prims("aten::slice_backward.default")
def _slice_backward(
    grad: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int, end: int, step: int
) -> torch.Tensor:
    """A slice's gradient, zeros around it: a pad (the slice's step as interior padding), which
    fuses into what reads it where the op would fill and copy a new buffer (Llama's rotary
    `rotate_half`, four a layer)."""
    d = canonical_dim(dim, len(input_sizes))
    size = input_sizes[d]
    if any(isinstance(v, torch.SymInt) for v in (start, end, size)):
        lo = _clamped(start, size)
    else:
        lo, _, _ = slice(start, end, step).indices(size)
    low, high, interior = [0] * grad.dim(), [0] * grad.dim(), [0] * grad.dim()
    low[d], interior[d] = lo, step - 1
    covered = lo + (grad.shape[d] - 1) * step + 1 if grad.shape[d] else lo
    high[d] = size - covered
    return prims.pad(grad, 0, low, high, interior)


@to_prims("aten::as_strided.default")
def _as_strided(
    a: torch.Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None
) -> torch.Tensor:
    offset = storage_offset if storage_offset is not None else a.storage_offset()
    return prims.as_strided(a, list(size), list(stride), offset - a.storage_offset())


@to_prims("aten::diagonal.default")
def _diagonal(a: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> torch.Tensor:
    d1, d2 = canonical_dim(dim1, a.dim()), canonical_dim(dim2, a.dim())
    if offset >= 0:
        length = max(min(a.shape[d1], a.shape[d2] - offset), 0)
        start = offset * a.stride(d2)
    else:
        length = max(min(a.shape[d1] + offset, a.shape[d2]), 0)
        start = -offset * a.stride(d1)
    keep = [d for d in range(a.dim()) if d not in (d1, d2)]
    shape = [a.shape[d] for d in keep] + [length]
    strides = [a.stride(d) for d in keep] + [a.stride(d1) + a.stride(d2)]
    return prims.as_strided(a, shape, strides, start if length else 0)


@to_prims("aten::unfold.default")
def _unfold(a: torch.Tensor, dimension: int, size: int, step: int) -> torch.Tensor:
    if a.dim() == 0:
        return prims.unsqueeze(a, 0)
    d = canonical_dim(dimension, a.dim())
    count = (a.shape[d] - size) // step + 1
    shape = list(a.shape)
    shape[d] = count
    strides = list(a.stride())
    strides[d] = a.stride(d) * step
    return prims.as_strided(a, [*shape, size], [*strides, a.stride(d)], 0)


# In-place view ops change only the tensor's metadata: in a Graph they are the view itself.
to_prims("aten::squeeze_.dim", "aten::squeeze_.default", "aten::squeeze_.dims")(squeeze)
to_prims("aten::unsqueeze_.default")(unsqueeze)
to_prims("aten::transpose_.default")(transpose)
to_prims("aten::t_.default")(_t)
to_prims("aten::as_strided_.default")(_as_strided)

# The *_copy ops are their view op followed by a copy.
_COPIES = {
    "view_copy.default": view,
    "unsqueeze_copy.default": unsqueeze,
    "squeeze_copy.default": squeeze,
    "squeeze_copy.dim": squeeze,
    "squeeze_copy.dims": squeeze,
    "transpose_copy.int": transpose,
    "t_copy.default": _t,
    "permute_copy.default": permute,
    "expand_copy.default": expand,
    "unfold_copy.default": _unfold,
    "diagonal_copy.default": _diagonal,
    "as_strided_copy.default": _as_strided,
    "alias_copy.default": lambda a: a,
    "narrow_copy.default": _narrow,
}


def _copied(fn: Any) -> Any:
    return lambda *args, **kwargs: prims.clone(fn(*args, **kwargs))


for _target, _view_fn in _COPIES.items():
    to_prims(f"aten::{_target}")(_copied(_view_fn))


@to_prims("aten::unbind_copy.int")
def _unbind_copy(a: torch.Tensor, dim: int = 0) -> list[torch.Tensor]:
    return [prims.clone(t) for t in _unbind(a, dim)]


@to_prims("aten::split_with_sizes_copy.default")
def _split_with_sizes_copy(
    a: torch.Tensor, split_sizes: Sequence[int], dim: int = 0
) -> list[torch.Tensor]:
    return [prims.clone(t) for t in split_with_sizes(a, split_sizes, dim)]


to_prims("aten::unsafe_split.Tensor")(_split)
to_prims("aten::unsafe_split_with_sizes.default")(split_with_sizes)


@to_prims("aten::resize_.default")
def _resize_(a: torch.Tensor, size: Sequence[int], memory_format: Any = None) -> torch.Tensor:
    """`a` with `size`: its elements in memory order, cut short or extended (ATen leaves the
    new elements uninitialized; here they are zeros). The tracer renames the resized tensor,
    so the result stands for it."""
    if not a.is_contiguous():
        raise NotImplementedError("resize_ of a non-contiguous tensor reads its storage order")
    flat = prims.reshape(a, [a.numel()])
    needed = math.prod(size)
    if needed <= a.numel():
        flat = prims.slice(flat, [0], [needed], [1])
    else:
        extra = prims.full([needed - a.numel()], 0, dtype=a.dtype, device=a.device)
        flat = prims.cat([flat, extra], 0)
    return prims.reshape(flat, list(size))
