"""Loop simplification merges loops that every index walks together, and only those."""

from __future__ import annotations

import sympy

from ember.inductor.ir.indexing import index_var
from ember.inductor.scheduler.loops import simplify_loops

x0, x1, x2 = (index_var("x", i) for i in range(3))
SIZES = [sympy.Integer(4), sympy.Integer(1), sympy.Integer(8)]


def test_contiguous_loops_merge_and_size_one_loops_drop() -> None:
    loops = simplify_loops([x0, x1, x2], SIZES, [8 * x0 + x2, 8 * x0 + x2 + 3], "x")
    assert loops.sizes == (32,)
    assert (8 * x0 + x2).xreplace(loops.mapping) == index_var("x", 0)


def test_a_transposed_read_keeps_loops_apart() -> None:
    loops = simplify_loops([x0, x1, x2], SIZES, [8 * x0 + x2, x0 + 4 * x2], "x")
    assert loops.sizes == (4, 8)
