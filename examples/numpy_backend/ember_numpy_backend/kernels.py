"""The kernel table: ember prim name (`prims::add`) -> a function over NumPy arrays.

A kernel takes the prim's arguments as its schema lists them, with tensors as `numpy.ndarray`
and dtypes as NumPy dtypes, and returns arrays. Each family module registers its kernels with
`@kernel(...)` on import; `MISSING` lists the prims this backend does not implement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Kernel = Callable[..., Any]

KERNELS: dict[str, Kernel] = {}


def kernel(*names: str) -> Callable[[Kernel], Kernel]:
    """Register `fn` as the NumPy kernel of the named prims (short names: `add`)."""

    def decorator(fn: Kernel) -> Kernel:
        for name in names:
            qualified = f"prims::{name}"
            if qualified in KERNELS:
                raise ValueError(f"{qualified} has two kernels")
            KERNELS[qualified] = fn
        return fn

    return decorator
