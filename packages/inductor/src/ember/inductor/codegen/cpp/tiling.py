"""Tiles for pointwise kernels that read a transposed input.

`x.t().contiguous()` stores along the last loop and reads along the one before it: run as
rows, every vector of stores reads one float from each of 16 lines, and a row of 2048
touches 2048 lines before any is reused. Cutting the last two loops into `TILE` x `TILE`
tiles keeps the lines a tile reads in cache until the tile has used them all. Values are
unchanged: each element is still computed once, by the same expression.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

from ember.inductor.ir.indexing import Expr, index_var

if TYPE_CHECKING:
    from ember.inductor.codegen.cpp.kernel import CppKernel

# Tile edge in elements: 16 float32 are one AVX-512 register and one 64-byte line.
TILE = 16


def transposed_tile(cpp: CppKernel) -> int | None:
    """`TILE` if the pointwise kernel reads some input contiguously along its next-to-last
    loop and strided along its last (a transposed read), else None."""
    kernel = cpp.kernel
    if kernel.inner or len(kernel.outer) < 2:
        return None
    if any(m.store_mode or m.store_indirect for m in kernel.members):
        return None
    last = index_var("x", len(kernel.outer) - 1)
    before = index_var("x", len(kernel.outer) - 2)
    for member in kernel.members:
        for load in member.loads():
            _, index, indirect = load.args
            if indirect:
                continue
            assert isinstance(index, sympy.Expr)
            if sympy.diff(index, before) == 1 and sympy.diff(index, last) not in (0, 1):
                return TILE
    return None


def open_tiled_loops(
    cpp: CppKernel, outer_vars: list[sympy.Symbol], numel: Expr, tile: int
) -> None:
    """Emit the loop headers (threads over the outer loops and the tiles, SIMD over a tile's
    row) and the opening brace of the body; the caller closes it."""
    from ember.inductor.codegen.cpp.kernel import PARALLEL_THRESHOLD

    kernel = cpp.kernel
    condition = f"if({cpp.size(numel)} >= {PARALLEL_THRESHOLD}L)"
    cpp.line(f"#pragma omp parallel for collapse({len(kernel.outer)}) {condition}")
    for variable, bound in zip(outer_vars[:-2], kernel.outer[:-2]):
        cpp.line(f"for (int64_t {variable} = 0; {variable} < {cpp.size(bound)}; ++{variable})")
    tiled = list(zip(outer_vars[-2:], kernel.outer[-2:]))
    for variable, bound in tiled:
        start = f"{variable}_tile"
        cpp.line(f"for (int64_t {start} = 0; {start} < {cpp.size(bound)}; {start} += {tile}L)")
    for position, (variable, bound) in enumerate(tiled):
        start = f"{variable}_tile"
        end = f"std::min<int64_t>({start} + {tile}L, {cpp.size(bound)})"
        if position == 1:
            cpp.line("#pragma omp simd")
        cpp.line(f"for (int64_t {variable} = {start}; {variable} < {end}; ++{variable})")
    cpp.line("{")
    cpp.depth += 1
