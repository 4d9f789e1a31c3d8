"""Creation prims: `full` (a constant-filled tensor) and `iota` (an arithmetic sequence).

They take no tensor operands: dtype and device are explicit, the result is contiguous.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ember.prims.primitives.prim import define

FAMILY = "creation"


def _full_meta(
    shape: Sequence[int], value: complex, *, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    return torch.empty(list(shape), dtype=dtype, device="meta")


define(
    "full",
    "(SymInt[] shape, Scalar value, *, ScalarType dtype, Device device) -> Tensor",
    _full_meta,
    lambda shape, value, *, dtype, device: torch.full(
        list(shape), value, dtype=dtype, device=device
    ),
    family=FAMILY,
    doc="new tensor of the shape, every element value converted to dtype",
)


def _iota_meta(
    length: int, start: int, step: int, *, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    return torch.empty([length], dtype=dtype, device="meta")


define(
    "iota",
    "(SymInt length, Scalar start, Scalar step, *, ScalarType dtype, Device device) -> Tensor",
    _iota_meta,
    lambda length, start, step, *, dtype, device: (
        start
        + step
        * torch.arange(
            length,
            dtype=torch.float64
            if (dtype.is_floating_point and not isinstance(step, int))
            else torch.int64,
            device=device,
        )
    ).to(dtype),
    family=FAMILY,
    doc="1-D tensor [start + i * step for i in range(length)] in dtype (computed exactly in "
    "int64, or float64 for float steps, then converted)",
)
