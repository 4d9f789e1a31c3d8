"""What memory a layout addresses: the layout a traced spec describes, whether a layout covers
one block once (so a buffer can be allocated in it as is), how far it reaches, and whether two
layouts address the same elements."""

from __future__ import annotations

import sympy

from ember.inductor.ir.indexing import Expr, as_expr, same
from ember.inductor.ir.tensors import Layout
from ember.prims import TensorSpec


def spec_layout(spec: TensorSpec, relative: bool = False) -> Layout:
    """The layout a spec describes. `relative`: offsets count from the tensor's first element
    (inputs and extern results: the wrapper passes `data_ptr()`, whatever storage offset
    the tensor has at run time)."""
    return Layout(
        spec.dtype,
        tuple(as_expr(s) for s in spec.shape),
        tuple(as_expr(s) for s in spec.strides),
        sympy.S.Zero if relative else as_expr(spec.storage_offset),
    )


def extent(layout: Layout) -> Expr:
    """Elements from the storage's start to one past the layout's last element."""
    last = layout.offset + sum(
        ((n - 1) * s for n, s in zip(layout.size, layout.stride)), sympy.S.Zero
    )
    return sympy.S.One if any(n == 0 for n in layout.size) else last + 1


def same_elements(a: Layout, b: Layout) -> bool:
    """Whether two layouts address the same elements (strides of size-1 dims aside)."""
    return (
        a.dtype == b.dtype
        and len(a.size) == len(b.size)
        and all(same(x, y) for x, y in zip(a.size, b.size))
        and same(a.offset, b.offset)
        and all(n == 1 or same(x, y) for x, y, n in zip(a.stride, b.stride, a.size))
    )


def dense(layout: Layout) -> bool:
    """Whether a layout covers a block of memory once (so it can be allocated as is)."""
    if layout.offset != 0:
        return False
    dims = [(s, n) for s, n in zip(layout.stride, layout.size) if n != 1]
    if not all(isinstance(s, sympy.Integer) and isinstance(n, sympy.Integer) for s, n in dims):
        return Layout.contiguous(layout.dtype, layout.size).stride == layout.stride
    expected = 1
    for stride, size in sorted(dims, key=lambda d: int(d[0])):
        if int(stride) != expected:
            return False
        expected *= int(size)
    return True
