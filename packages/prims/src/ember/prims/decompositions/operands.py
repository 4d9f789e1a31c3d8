"""Operand preparation for elementwise prims: type promotion, scalar wrapping, broadcasting.

Elementwise prims take operands of one shape and one dtype; ATen ops promote and broadcast
implicitly. These helpers make that explicit with `convert_element_type`, `full` and
`broadcast_in_dim`, following torch's promotion rules (tensors with dims outrank 0-d tensors,
which outrank Python scalars, within the highest category bool < integer < float < complex).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.primitives import prims

Operand = Any  # a tensor or a Python number

_DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
)
# torch.promote_types dispatches (a tracer would record it): tabulate it once, up front.
_PROMOTE = {(a, b): torch.promote_types(a, b) for a, b in itertools.product(_DTYPES, _DTYPES)}


def promote_types(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    return _PROMOTE[(a, b)]


def _category(dtype: torch.dtype) -> int:
    if dtype == torch.bool:
        return 0
    if dtype.is_complex:
        return 3
    return 2 if dtype.is_floating_point else 1


def _scalar_dtype(value: Any) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if isinstance(value, complex):
        return torch.complex64 if torch.get_default_dtype() == torch.float32 else torch.complex128
    return torch.get_default_dtype()


def result_type(*operands: Operand) -> torch.dtype:
    """The dtype torch computes an elementwise op of `operands` in."""
    tiers: list[list[torch.dtype]] = [[], [], []]  # dimensioned tensors, 0-d tensors, scalars
    for operand in operands:
        if isinstance(operand, torch.Tensor):
            tiers[0 if operand.dim() else 1].append(operand.dtype)
        elif operand is not None:
            tiers[2].append(_scalar_dtype(operand))
    result: torch.dtype | None = None
    for tier in tiers:
        if not tier:
            continue
        tier_type = tier[0]
        for dtype in tier[1:]:
            tier_type = promote_types(tier_type, dtype)
        if result is None:
            result = tier_type
        elif _category(tier_type) > _category(result):
            if tier is tiers[2] and _category(tier_type) == 2 and _category(result) < 2:
                result = torch.get_default_dtype()
            elif tier is tiers[2] and _category(tier_type) == 3:
                result = torch.complex64 if result != torch.float64 else torch.complex128
            else:
                result = tier_type
    if result is None:
        raise TypeError("no operand to take a dtype from")
    return result


def to_float(dtype: torch.dtype) -> torch.dtype:
    """Integer and bool dtypes compute transcendental ops in the default float dtype."""
    return dtype if dtype.is_floating_point or dtype.is_complex else torch.get_default_dtype()


def device_of(*operands: Operand) -> torch.device:
    for operand in operands:
        if isinstance(operand, torch.Tensor):
            return operand.device
    return torch.device("cpu")


def broadcast_shapes(*shapes: Sequence[int]) -> list[int]:
    ndim = max((len(s) for s in shapes), default=0)
    if all(len(s) == ndim for s in shapes) and all(
        all(_same(size, other) for other in (s[i] for s in shapes[1:]))
        for i, size in enumerate(shapes[0] if shapes else ())
    ):
        # equal shapes broadcast to themselves, whatever their sizes: asking `s1 - 1 != 1`
        # of a symbolic size would add a guard (`s1 != 2`) the Graph did not have
        return list(shapes[0])
    result = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape):
            dim = ndim - len(shape) + i
            if size != 1:
                if result[dim] not in (1, size):
                    raise ValueError(f"shapes {[list(s) for s in shapes]} do not broadcast")
                result[dim] = size
    return result


def _same(a: int, b: int) -> bool:
    """Whether two sizes are the same int or the same symbolic expression (no guard)."""
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return bool(a.node.expr == b.node.expr)
    if isinstance(a, torch.SymInt) or isinstance(b, torch.SymInt):
        return False
    return a == b


def convert(x: Operand, dtype: torch.dtype) -> Operand:
    """x as dtype: tensors through convert_element_type (if needed), numbers as numbers."""
    if isinstance(x, torch.Tensor):
        return x if x.dtype == dtype else prims.convert_element_type(x, dtype)
    return x


def expand_to(
    x: Operand, shape: Sequence[int], dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """x broadcast to `shape` in `dtype`: numbers become `full`, tensors broadcast_in_dim."""
    if not isinstance(x, torch.Tensor):
        return prims.full(list(shape), x, dtype=dtype, device=device)
    x = convert(x, dtype)
    if list(x.shape) == list(shape):
        return x
    offset = len(shape) - x.dim()
    return prims.broadcast_in_dim(x, list(shape), list(range(offset, len(shape))))


def broadcast(*operands: Operand, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """All operands as tensors of one broadcast shape and one dtype (promoted by default)."""
    dtype = dtype or result_type(*operands)
    shape = broadcast_shapes(*(o.shape for o in operands if isinstance(o, torch.Tensor)))
    device = device_of(*operands)
    return [expand_to(o, shape, dtype, device) for o in operands]


def scalar_like(value: Any, like: torch.Tensor) -> torch.Tensor:
    """A tensor of `like`'s shape and dtype filled with value."""
    return prims.full(list(like.shape), value, dtype=like.dtype, device=like.device)


def canonical_dim(dim: int, ndim: int) -> int:
    """dim wrapped into [0, ndim) (a 0-d tensor has one wrappable dim)."""
    size = max(ndim, 1)
    if not -size <= dim < size:
        raise IndexError(f"dim {dim} is out of range for {ndim} dims")
    return dim % size


def canonical_dims(dims: Any, ndim: int) -> list[int]:
    """A sorted list of dims from None (all), an int or a list; wrapped."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({canonical_dim(d, ndim) for d in dims} - ({0} if ndim == 0 else set()))
