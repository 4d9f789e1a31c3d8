"""Loop order from strides: the loop that most accesses walk with stride 1 runs innermost
(the fastest-varying lane index of a Triton program, the vectorized loop in C++)."""

from __future__ import annotations

import sympy

from ember.inductor.ir.indexing import ModularIndexing, index_var
from ember.inductor.scheduler.loops import simplify_loops

k, n = sympy.symbols("k n", integer=True, nonnegative=True)


def test_cast_into_a_column_major_buffer_walks_memory_in_order() -> None:
    # a [K=16, N=40] column-major store and a row-major [N, K] load: both have stride 1 in k
    store, load = 16 * n + k, 16 * n + k
    loops = simplify_loops((k, n), (16, 40), [store, load], "x", reorder=True)
    assert loops.sizes == (640,)  # k innermost: the two loops merge into one contiguous walk
    kept = simplify_loops((k, n), (16, 40), [store, load], "x")  # without: k stays outer
    assert kept.sizes == (16, 40) and kept.mapping[k] == index_var("x", 0)


def test_wrapped_indices_and_broadcast_loads() -> None:
    # Llama's log-softmax backward, written transposed: the store and two loads walk v (the
    # loads as `v % 1024`), a per-token vector is read at t; v must run innermost
    v, t = sympy.symbols("v t", integer=True, nonnegative=True)
    wrapped = 1024 * t + ModularIndexing(v, 1, 1024)
    loops = simplify_loops((v, t), (1024, 128), [v + 1024 * t, t, wrapped, wrapped], "x", True)
    assert loops.sizes == (128, 1024) and loops.mapping[v] == index_var("x", 1)


def test_ties_keep_the_order() -> None:
    # a transpose: the store walks n, the load walks k with stride 1; the order stays
    loops = simplify_loops((k, n), (16, 40), [k * 40 + n, n * 16 + k], "x", reorder=True)
    assert loops.sizes == (16, 40) and loops.mapping[n] == index_var("x", 1)
