"""The strides an extern call's tensor arguments are realized in: the ones the Graph declares
for them, i.e. eager's (issue 14).

A vendor kernel may require more of its arguments than their values: memory-efficient
attention takes its bias only when every stride but the last is a multiple of 8 elements
(16 bytes of bf16). Eager's `scaled_dot_product_attention` pads a bias's last dim to a multiple
of 8 and slices it back, so the op receives a view with gaps, and the Graph records that
view's strides. Computed row-major instead, Swin's [B, 3, 49, 49] bias had a batch stride of
7203 and the op refused it on the H100 ("attn_bias is not correctly aligned"). So a lazy
argument is computed in its declared layout, gaps included (as a view of its base's buffer
when the Graph's views lead there, else into a buffer spanning the layout); a layout that
repeats elements (an expanded bias: stride 0) is computed once along the repeated dims and
viewed with stride 0. The arguments an op checks (`EXACT_STRIDES` in `extern.py`) are copied
into their declared strides when an earlier realization chose others.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
import torch

from ember.inductor.ir.indexing import same
from ember.inductor.ir.tensors import Layout, Relayout, StorageView


def non_overlapping(layout: Layout) -> bool:
    """Whether a layout of static sizes addresses every element at a different place (gaps
    allowed): sorted by stride, each dim steps past everything the smaller ones reach."""
    dims = [(s, n) for s, n in zip(layout.stride, layout.size) if n != 1]
    if not all(isinstance(s, sympy.Integer) and isinstance(n, sympy.Integer) for s, n in dims):
        return False
    reach = 0  # the largest offset the dims with smaller strides reach
    for stride, size in sorted(dims, key=lambda d: int(d[0])):
        if int(stride) <= reach:
            return False
        reach += (int(size) - 1) * int(stride)
    return True


def repeated_once(layout: Layout) -> Layout | None:
    """`layout` with every dim it repeats (stride 0, size > 1) cut to size 1, when that leaves a
    non-overlapping layout; else None. Computing that layout and viewing it with the zero
    strides gives the repeated one (an expanded bias) without writing an element twice."""
    size = tuple(
        sympy.S.One if same(stride, sympy.S.Zero) else n
        for n, stride in zip(layout.size, layout.stride)
    )
    if size == layout.size:
        return None
    once = Layout(layout.dtype, size, layout.stride, layout.offset)
    return once if non_overlapping(once) else None


def same_strides(have: Layout, want: Layout) -> bool:
    """Whether two layouts of one shape step alike in every dim of size > 1 (where a tensor
    starts is the caller's: a wrapper passes each argument's first element)."""
    return len(have.size) == len(want.size) and all(
        same(n, m) and (same(n, sympy.S.One) or same(a, b))
        for n, m, a, b in zip(have.size, want.size, have.stride, want.stride)
    )


def checked_argument(exact: Sequence[int | str], position: int | str | None,
             schema: torch.FunctionSchema | None) -> bool:  # fmt: skip
    """Whether the argument at `position` (an index or a name) is one of `exact`, which name
    arguments by index or by name."""
    if position is None:
        return False
    if position in exact:
        return True
    if schema is None:
        return False
    names = [argument.name for argument in schema.arguments]
    if isinstance(position, int):
        return position < len(names) and names[position] in exact
    return position in names and names.index(position) in exact


def relaid(memory: StorageView, relayouts: Sequence[Relayout]) -> Layout | None:
    """The layout a chain of views takes over `memory` (None: a view no layout expresses)."""
    layout: Layout | None = memory.layout
    for relayout in relayouts:
        if layout is None:
            return None
        layout = relayout(StorageView(memory.storage, layout))
    return layout
