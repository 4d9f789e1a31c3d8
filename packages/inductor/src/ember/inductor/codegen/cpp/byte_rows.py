"""One-byte rows a kernel's row reductions read, widened to int32 first.

GCC 12 vectorizes a loop with as many lanes as its narrowest type fits in a vector: a row
reduction that loads a causal mask's bools runs 64 lanes on AVX-512 (four float32 vectors a
step), so a row shorter than 64 (32 with the epilogue) takes the scalar loop, whose `omp simd
reduction` private copies are 64-element arrays combined one by one at the end of every row.
TinyDecoder's masked softmax ran 14 ns a value at 16 tokens and 10 at 32 (1.2 at 256). Before
the row's loops, each such row is copied into an int32 array on the thread's stack (one plain
loop, no reduction), and the reduction and epilogue loops read that instead: 16 float32 lanes,
6 and 3.2 ns a value at 16 and 32 tokens, 1.3 against 1.9 at 64, the same at 256 (C++
harness, one core).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy
import torch

from ember.inductor.codegen.cpp.ops import CPP_TYPES
from ember.inductor.codegen.cpp.row_reuse import row_capacity
from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.indexing import index_var

if TYPE_CHECKING:
    from ember.inductor.codegen.cpp.kernel import CppKernel

BYTE_DTYPES = frozenset({torch.bool, torch.uint8, torch.int8})


def unmasked_loads(node: BodyValue) -> list[BodyValue]:
    """The loads of a body outside `masked` subtrees (those may be out of range unmasked)."""
    if node.op == "load":
        return [node]
    if node.op == "masked":
        return []
    return [load for child in node.children() for load in unmasked_loads(child)]


def widen_byte_rows(cpp: CppKernel) -> None:
    """At one point of the kernel's outer loops: copy every one-byte row a reduction member
    loads along its single reduction loop into an int32 stack array, and make the loops'
    loads of it (`cpp.staged`) read the array."""
    kernel = cpp.kernel
    if len(kernel.inner) != 1:
        return
    capacity = row_capacity(kernel.inner[0], cpp.program.size_ranges)
    if capacity is None:
        return
    variable = index_var("r", 0)
    written = {m.node.storage for m in kernel.members}
    rows: dict[tuple[str, str], tuple[str, sympy.Expr, torch.dtype]] = {}
    for member in kernel.members:
        if member.level != "reduction":
            continue
        for load in unmasked_loads(member.body):
            storage, index, indirect = load.args
            assert isinstance(index, sympy.Expr)
            if (
                indirect
                or load.dtype not in BYTE_DTYPES
                or str(storage) in written
                or variable not in index.free_symbols
            ):
                continue
            rows.setdefault((str(storage), str(index)), (str(storage), index, load.dtype))
    size = cpp.size(kernel.inner[0])
    for number, (key, (storage, index, dtype)) in enumerate(rows.items()):
        wide = f"wide{number}"
        cpp.storages[storage] = None
        cpp.line(f"int32_t {wide}[{capacity}L];")
        cpp.line("#pragma omp simd")
        with cpp.block(f"for (int64_t {variable} = 0; {variable} < {size}; ++{variable})"):
            cpp.line(f"{wide}[{variable}] = {storage}[{cpp.index(index)}];")
        element = f"{wide}[{variable}]"
        cpp.staged[key] = (
            f"({element} != 0)"
            if dtype == torch.bool
            else f"static_cast<{CPP_TYPES[dtype]}>({element})"
        )
