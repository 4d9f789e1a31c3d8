"""Triton kernel sources the launcher tests load (a pointwise add, a row sum, an unmasked copy)."""

from __future__ import annotations

POINTWISE = """
import triton
import triton.language as tl


@triton.jit
def add_kernel(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    a = tl.load(in_ptr0 + xindex, xmask)
    b = tl.load(in_ptr1 + xindex, xmask)
    tl.store(out_ptr0 + xindex, _scaled(a, b), xmask)


@triton.jit
def _scaled(a, b):
    return a * 2 + b
"""

POINTWISE_SIGNATURE = {"in_ptr0": "*fp32", "in_ptr1": "*fp32", "out_ptr0": "*fp32", "xnumel": "i64"}

REDUCTION = """
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(in_ptr0, out_ptr0, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    # A persistent reduction (one RBLOCK holds a row). A loop `range(0, rnumel, RBLOCK)` over a
    # runtime size fails in triton 3.6's interpreter with numpy >= 2.4 (int() of a 1-d array).
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    rmask = rindex < rnumel
    values = tl.load(in_ptr0 + xindex * rnumel + rindex, xmask & rmask, other=0.0)
    tl.store(out_ptr0 + xindex, tl.sum(values, 1)[:, None], xmask)
"""

REDUCTION_SIGNATURE = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i64", "rnumel": "i64"}

COPY = """
import triton
import triton.language as tl


@triton.jit
def copy_kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex))
"""

COPY_SIGNATURE = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i64"}
