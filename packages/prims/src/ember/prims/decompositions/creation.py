"""ATen factory ops written with `full` and `iota`: empty/zeros/ones/full (and their _like and
new_ forms), scalar_tensor, arange, linspace, eye, fill and zero_.

`empty` is defined as zeros: prims have no uninitialized memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.operands import expand_to, scalar_like
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims


def _device(device: Any, like: torch.Tensor | None = None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return like.device if like is not None else torch.device("cpu")


def full(shape: Sequence[int], value: Any, dtype: torch.dtype | None, device: Any) -> torch.Tensor:
    if dtype is None:
        dtype = (
            torch.get_default_dtype()
            if isinstance(value, float)
            else (torch.bool if isinstance(value, bool) else torch.int64)
        )
    return prims.full(list(shape), value, dtype=dtype, device=_device(device))


@to_prims("aten::empty.memory_format", "aten::zeros.default")
def _zeros(
    size: Sequence[int],
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
    memory_format: Any = None,
    requires_grad: bool = False,
) -> torch.Tensor:
    return full(size, 0, dtype or torch.get_default_dtype(), device)


@to_prims("aten::empty_strided.default")
def _empty_strided(
    size: Sequence[int],
    stride: Sequence[int],
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    return full(size, 0, dtype or torch.get_default_dtype(), device)


@to_prims("aten::ones.default")
def _ones(
    size: Sequence[int],
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    return full(size, 1, dtype or torch.get_default_dtype(), device)


@to_prims("aten::full.default")
def _full(
    size: Sequence[int],
    fill_value: Any,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    return full(size, fill_value, dtype, device)


@to_prims("aten::scalar_tensor.default")
def _scalar_tensor(
    s: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None
) -> torch.Tensor:
    return full([], s, dtype or torch.get_default_dtype(), device)


def _like(value: Any) -> Any:
    def decomposition(
        a: torch.Tensor,
        *args: Any,
        dtype: Any = None,
        layout: Any = None,
        device: Any = None,
        pin_memory: Any = None,
        memory_format: Any = None,
    ) -> torch.Tensor:
        fill = args[0] if args else value
        return prims.full(list(a.shape), fill, dtype=dtype or a.dtype, device=_device(device, a))

    return decomposition


to_prims("aten::empty_like.default", "aten::zeros_like.default")(_like(0))
to_prims("aten::ones_like.default")(_like(1))
to_prims("aten::full_like.default")(_like(None))


def _new(value: Any) -> Any:
    def decomposition(
        a: torch.Tensor,
        size: Sequence[int],
        *args: Any,
        dtype: Any = None,
        layout: Any = None,
        device: Any = None,
        pin_memory: Any = None,
    ) -> torch.Tensor:
        fill = args[0] if args else value
        return prims.full(list(size), fill, dtype=dtype or a.dtype, device=_device(device, a))

    return decomposition


to_prims("aten::new_empty.default", "aten::new_zeros.default")(_new(0))
to_prims("aten::new_ones.default")(_new(1))
to_prims("aten::new_full.default")(_new(None))


@to_prims("aten::new_empty_strided.default")
def _new_empty_strided(
    a: torch.Tensor,
    size: Sequence[int],
    stride: Sequence[int],
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    return prims.full(list(size), 0, dtype=dtype or a.dtype, device=_device(device, a))


@to_prims("aten::fill.Scalar", "aten::fill.Tensor")
def fill(a: torch.Tensor, value: Any) -> torch.Tensor:
    return expand_to(value, list(a.shape), a.dtype, a.device)


@to_prims("aten::fill_.Scalar", "aten::fill_.Tensor")
def _fill_(a: torch.Tensor, value: Any) -> torch.Tensor:
    return prims.copy_to(a, fill(a, value))


@to_prims("aten::zero_.default")
def _zero_(a: torch.Tensor) -> torch.Tensor:
    return prims.copy_to(a, scalar_like(0, a))


@to_prims("aten::zero.default")
def _zero(a: torch.Tensor) -> torch.Tensor:
    return scalar_like(0, a)


@to_prims("aten::arange.start_step", "aten::arange.start", "aten::arange.default")
def _arange(
    start: Any,
    end: Any = None,
    step: Any = 1,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    if end is None:
        start, end = 0, start
    values = [start, end, step]
    if dtype is None:
        dtype = (
            torch.get_default_dtype()
            if any(isinstance(v, float) for v in values)
            else (torch.int64)
        )
    length = max(math.ceil((end - start) / step), 0)
    return prims.iota(length, start, step, dtype=dtype, device=_device(device))


@to_prims("aten::linspace.default")
def _linspace(
    start: Any,
    end: Any,
    steps: int,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    dev = _device(device)
    if steps == 1:
        return prims.full([1], start, dtype=dtype, device=dev)
    step = (end - start) / (steps - 1)
    index = prims.iota(steps, 0, 1, dtype=torch.float64, device=dev)
    return _two_sided_fill(
        index,
        scalar_like(start, index),
        scalar_like(end, index),
        scalar_like(step, index),
        steps,
        dtype,
    )


def _two_sided_fill(
    index: torch.Tensor,
    first: torch.Tensor,
    last: torch.Tensor,
    step: torch.Tensor,
    steps: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """torch's linspace values: the first half counted up from `first`, the second half
    counted down from `last` (so both ends are exact), in `dtype`."""
    forward = prims.add(prims.mul(index, step), first)
    backward = prims.sub(last, prims.mul(prims.sub(scalar_like(steps - 1, index), index), step))
    values = prims.where(prims.lt(index, scalar_like(steps // 2, index)), forward, backward)
    return _as_dtype(values, dtype)


def _as_dtype(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Float64 values in `dtype`, truncated toward zero for integer dtypes (as torch does)."""
    if not dtype.is_floating_point:
        values = prims.trunc(values)
    return prims.convert_element_type(values, dtype)


@to_prims("aten::eye.default", "aten::eye.m")
def _eye(
    n: int,
    m: int | None = None,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    m = n if m is None else m
    dev = _device(device)
    rows = prims.broadcast_in_dim(prims.iota(n, 0, 1, dtype=torch.int64, device=dev), [n, m], [0])
    cols = prims.broadcast_in_dim(prims.iota(m, 0, 1, dtype=torch.int64, device=dev), [n, m], [1])
    return prims.convert_element_type(prims.eq(rows, cols), dtype or torch.get_default_dtype())


@to_prims("aten::empty_permuted.default")
def _empty_permuted(
    size: Sequence[int],
    physical_layout: Sequence[int],
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    return full(size, 0, dtype or torch.get_default_dtype(), device)


@to_prims(
    "aten::linspace.Tensor_Tensor", "aten::linspace.Tensor_Scalar", "aten::linspace.Scalar_Tensor"
)
def _linspace_tensors(
    start: Any,
    end: Any,
    steps: int,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    """linspace with 0-d tensor ends: the same two-sided formula, computed on tensors."""
    dtype = dtype or torch.get_default_dtype()
    like = start if isinstance(start, torch.Tensor) else end
    dev = _device(device, like)
    index = prims.iota(steps, 0, 1, dtype=torch.float64, device=dev)
    first, last = (
        expand_to(x, [steps], torch.float64, dev) if isinstance(x, torch.Tensor) else x
        for x in (start, end)
    )
    first = first if isinstance(first, torch.Tensor) else scalar_like(first, index)
    last = last if isinstance(last, torch.Tensor) else scalar_like(last, index)
    if steps == 1:
        return prims.convert_element_type(first, dtype)
    step = prims.div(prims.sub(last, first), scalar_like(steps - 1, index))
    return _two_sided_fill(index, first, last, step, steps, dtype)


@to_prims(
    "aten::logspace.default",
    "aten::logspace.Tensor_Tensor",
    "aten::logspace.Tensor_Scalar",
    "aten::logspace.Scalar_Tensor",
)
def _logspace(
    start: Any,
    end: Any,
    steps: int,
    base: float = 10.0,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    if isinstance(start, torch.Tensor) or isinstance(end, torch.Tensor):
        exponents = _linspace_tensors(start, end, steps, dtype=torch.float64, device=device)
    else:
        exponents = _linspace(start, end, steps, dtype=torch.float64, device=device)
    return _as_dtype(prims.pow(scalar_like(float(base), exponents), exponents), dtype)
