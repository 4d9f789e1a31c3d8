"""Meta rules for ATen view and shape ops whose C++ meta kernels reject symbolic sizes.

torch's C++ kernels for `view`, `expand`, `permute`, `slice` and friends convert sizes to
concrete integers, so a meta tensor of symbolic size cannot pass through them. For these ops
the tracer computes sizes and strides here, with SymInt arithmetic (which records guards in
ember's ShapeEnv), and builds the result with `as_strided` (views) or `empty_strided`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ember.prims.ops import op_name

_META = torch.device("meta")
_END_SENTINEL = 2**62  # `x[a:]` reaches ATen as slice(end=sys.maxsize)

Size = Any  # int | torch.SymInt
MetaRule = Callable[..., Any]


def has_symbolic_sizes(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Whether any meta tensor or size among the arguments is symbolic."""
    return any(_symbolic(a) for a in (*args, *kwargs.values()))


def _symbolic(arg: Any) -> bool:
    if isinstance(arg, torch.SymInt | torch.SymFloat | torch.SymBool):
        return True
    if isinstance(arg, torch.Tensor):
        # A meta kernel's result can keep SymInt sizes that are constants (broadcasting s0
        # with 5 under the guard s0 == 5): Python reads them as ints, but torch's C++ kernels
        # still see a symbolic tensor and refuse it as they refuse any other.
        return arg._has_symbolic_sizes_strides or any(
            isinstance(s, torch.SymInt) for s in (*arg.shape, *arg.stride())
        )
    if isinstance(arg, list | tuple):
        return any(_symbolic(item) for item in arg)
    return False


def contiguous_strides(sizes: Sequence[Size]) -> list[Size]:
    strides: list[Size] = []
    running: Size = 1
    for size in reversed(sizes):
        strides.append(running)
        running = running * size
    return list(reversed(strides))


def _numel(sizes: Sequence[Size]) -> Size:
    total: Size = 1
    for size in sizes:
        total = total * size
    return total


def _is_contiguous(tensor: torch.Tensor) -> bool:
    expected: Size = 1
    for size, stride in zip(reversed(tensor.shape), reversed(tensor.stride())):
        if _statically_one(size):
            continue
        if not _same(stride, expected):
            return False
        expected = expected * size
    return True


def _statically_one(size: Size) -> bool:
    return isinstance(size, int) and size == 1


def _statically_zero(size: Size) -> bool:
    return isinstance(size, int) and size == 0


def _same(a: Size, b: Size) -> bool:
    """Equal as expressions (no guard), or equal integers."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return str(a) == str(b)


def _dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _infer_size(sizes: Sequence[Size], numel: Size) -> list[Size]:
    """`sizes` with its one -1 replaced by what makes the element count `numel`."""
    sizes = list(sizes)
    unknown = [i for i, s in enumerate(sizes) if isinstance(s, int) and s == -1]
    if len(unknown) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if unknown:
        known = _numel([s for i, s in enumerate(sizes) if i != unknown[0]])
        sizes[unknown[0]] = numel // known
    return sizes


def _view_strides(
    old_sizes: Sequence[Size], old_strides: Sequence[Size], new_sizes: Sequence[Size]
) -> list[Size] | None:
    """Strides that let `new_sizes` view memory laid out as (old_sizes, old_strides), or None.

    Dimensions of the old layout are grouped into chunks that are contiguous with each other;
    each chunk must be split exactly by a run of new dimensions.
    """
    if not old_sizes:
        return [1] * len(new_sizes)
    if any(_statically_zero(size) for size in old_sizes):
        # No elements: any strides do; torch keeps the old ones for the same sizes (a view
        # of a batch of 0 transposed matrices) and takes contiguous ones otherwise.
        if len(old_sizes) == len(new_sizes) and all(map(_same, old_sizes, new_sizes)):
            return list(old_strides)
        return contiguous_strides(new_sizes)
    new_strides: list[Size] = [0] * len(new_sizes)
    view_d = len(new_sizes) - 1
    chunk_base_stride = old_strides[-1]
    tensor_numel: Size = 1
    view_numel: Size = 1
    for tensor_d in range(len(old_sizes) - 1, -1, -1):
        tensor_numel = tensor_numel * old_sizes[tensor_d]
        chunk_ends = tensor_d == 0 or (
            old_sizes[tensor_d - 1] != 1
            and old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride
        )
        if chunk_ends:
            while view_d >= 0 and (view_numel < tensor_numel or new_sizes[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel = view_numel * new_sizes[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = old_strides[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return new_strides


def _view(self: torch.Tensor, size: Sequence[Size]) -> torch.Tensor:
    sizes = _infer_size(size, _numel(self.shape))
    if _is_contiguous(self):
        strides: list[Size] | None = contiguous_strides(sizes)
    else:
        strides = _view_strides(list(self.shape), list(self.stride()), sizes)
    if strides is None:
        raise RuntimeError(
            "view size is not compatible with input tensor's size and stride; use .reshape(...)"
        )
    return self.as_strided(sizes, strides, self.storage_offset())


def _reshape(self: torch.Tensor, shape: Sequence[Size]) -> torch.Tensor:
    """A view where the layout allows one, otherwise a contiguous copy (as torch.reshape)."""
    sizes = _infer_size(shape, _numel(self.shape))
    if _is_contiguous(self):
        return self.as_strided(sizes, contiguous_strides(sizes), self.storage_offset())
    strides = _view_strides(list(self.shape), list(self.stride()), sizes)
    if strides is None:
        return _empty_like_contiguous(sizes, self.dtype)
    return self.as_strided(sizes, strides, self.storage_offset())


def _unsafe_view(self: torch.Tensor, size: Sequence[Size]) -> torch.Tensor:
    sizes = _infer_size(size, _numel(self.shape))
    return torch.empty_strided(sizes, contiguous_strides(sizes), dtype=self.dtype, device=_META)


def _expand(self: torch.Tensor, size: Sequence[Size], implicit: bool = False) -> torch.Tensor:
    del implicit
    rank = len(size)
    offset = rank - self.dim()
    if offset < 0:
        raise RuntimeError("expand: the number of sizes must be at least the tensor's rank")
    sizes: list[Size] = []
    strides: list[Size] = []
    for d, target in enumerate(size):
        if d < offset:
            if isinstance(target, int) and target == -1:
                raise RuntimeError("expand: -1 is not allowed in a new leading dimension")
            sizes.append(target)
            strides.append(0)
            continue
        old_size, old_stride = self.shape[d - offset], self.stride()[d - offset]
        if isinstance(target, int) and target == -1:
            sizes.append(old_size)
            strides.append(old_stride)
        elif _statically_one(old_size) and not _statically_one(target):
            sizes.append(target)
            strides.append(0)
        else:
            sizes.append(target)
            strides.append(old_stride)
    return self.as_strided(sizes, strides, self.storage_offset())


def _permute(self: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    order = [_dim(d, self.dim()) for d in dims]
    sizes = [self.shape[d] for d in order]
    strides = [self.stride()[d] for d in order]
    return self.as_strided(sizes, strides, self.storage_offset())


def _transpose(self: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    order = list(range(self.dim()))
    a, b = _dim(dim0, self.dim()), _dim(dim1, self.dim())
    order[a], order[b] = order[b], order[a]
    return _permute(self, order)


def _clamp_index(index: Size | None, size: Size, default: Size) -> Size:
    if index is None or (isinstance(index, int) and index >= _END_SENTINEL):
        return default
    if isinstance(index, int) and index < 0:
        index = index + size
    if isinstance(index, int) and isinstance(size, int):
        return max(0, min(index, size))
    # Symbolic: each bound is decided at the hints and guarded, as torch's slice meta does; a
    # guard `s0 <= 64` narrows s0's range, where sym_min would carry min(64, s0) into every
    # later size (and a size guard on it recompiles at the bound).
    if index < 0:
        return 0
    if index > size:
        return size
    return index


def _slice(
    self: torch.Tensor,
    dim: int = 0,
    start: Size | None = None,
    end: Size | None = None,
    step: int = 1,
) -> torch.Tensor:
    dim = _dim(dim, self.dim())
    size = self.shape[dim]
    begin = _clamp_index(start, size, 0)
    stop = _clamp_index(end, size, size)
    length = torch.sym_max(0, (stop - begin + step - 1) // step)
    sizes = list(self.shape)
    strides = list(self.stride())
    offset = self.storage_offset() + begin * strides[dim]
    sizes[dim] = length
    strides[dim] = strides[dim] * step
    return self.as_strided(sizes, strides, offset)


def _narrow(self: torch.Tensor, dim: int, start: Size, length: Size) -> torch.Tensor:
    return _slice(self, dim, start, start + length)


def _split_with_sizes(
    self: torch.Tensor, split_sizes: Sequence[Size], dim: int = 0
) -> list[torch.Tensor]:
    dim = _dim(dim, self.dim())
    pieces: list[torch.Tensor] = []
    start: Size = 0
    for length in split_sizes:
        pieces.append(_slice(self, dim, start, start + length))
        start = start + length
    return pieces


def _split(self: torch.Tensor, split_size: Size, dim: int = 0) -> list[torch.Tensor]:
    dim = _dim(dim, self.dim())
    size = self.shape[dim]
    count = max(1, int(-(-size // split_size)))  # int() specializes (and guards) the count
    lengths: list[Size] = [split_size] * (count - 1)
    lengths.append(size - split_size * (count - 1))
    return _split_with_sizes(self, lengths, dim)


def _unbind(self: torch.Tensor, dim: int = 0) -> list[torch.Tensor]:
    dim = _dim(dim, self.dim())
    count = int(self.shape[dim])
    return [self.select(dim, i) for i in range(count)]


def _squeeze_dims(self: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    drop = {_dim(d, self.dim()) for d in dims}
    keep = [d for d in range(self.dim()) if not (d in drop and self.shape[d] == 1)]
    sizes = [self.shape[d] for d in keep]
    strides = [self.stride()[d] for d in keep]
    return self.as_strided(sizes, strides, self.storage_offset())


def _squeeze_dim(self: torch.Tensor, dim: int) -> torch.Tensor:
    return _squeeze_dims(self, [dim])


def _squeeze(self: torch.Tensor) -> torch.Tensor:
    return _squeeze_dims(self, list(range(self.dim())))


def _empty_like_contiguous(shape: Sequence[Size], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_strided(list(shape), contiguous_strides(shape), dtype=dtype, device=_META)


def _native_layer_norm(
    input: torch.Tensor,
    normalized_shape: Sequence[Size],
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    del weight, bias, eps
    axis = input.dim() - len(normalized_shape)
    stats_shape = [*input.shape[:axis], *([1] * len(normalized_shape))]
    stats_dtype = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    return (
        _empty_like_contiguous(input.shape, input.dtype),
        _empty_like_contiguous(stats_shape, stats_dtype),
        _empty_like_contiguous(stats_shape, stats_dtype),
    )


def _safe_softmax(self: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    del dim
    return _empty_like_contiguous(self.shape, dtype or self.dtype)


# Qualified ATen overload -> meta rule taking the meta arguments as the op takes them.
SYMBOLIC_META: dict[str, MetaRule] = {
    "aten::view.default": _view,
    "aten::_unsafe_view.default": _unsafe_view,
    "aten::reshape.default": _reshape,
    "aten::_reshape_alias.default": lambda self, size, stride: self.as_strided(
        size, stride, self.storage_offset()
    ),
    "aten::expand.default": _expand,
    "aten::permute.default": _permute,
    "aten::transpose.int": _transpose,
    "aten::slice.Tensor": _slice,
    "aten::narrow.default": _narrow,
    "aten::split.Tensor": _split,
    "aten::split_with_sizes.default": _split_with_sizes,
    "aten::unbind.int": _unbind,
    "aten::squeeze.default": _squeeze,
    "aten::squeeze.dim": _squeeze_dim,
    "aten::squeeze.dims": _squeeze_dims,
    "aten::native_layer_norm.default": _native_layer_norm,
    "aten::_safe_softmax.default": _safe_softmax,
}


class SymbolicMetaMode(TorchDispatchMode):
    """Routes ops made on meta tensors through the rules above when sizes are symbolic.

    Meta rules written with torch view ops (the prims' own) run inside this mode, so that
    their `expand`, `view` and `permute` calls work on symbolic sizes too.
    """

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        rule = SYMBOLIC_META.get(op_name(func))
        if rule is not None and has_symbolic_sizes(args, kwargs):
            return rule(*args, **kwargs)
        return func(*args, **kwargs)
