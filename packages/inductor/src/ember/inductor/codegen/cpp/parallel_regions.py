"""When a C++ kernel's loops run on OpenMP threads: the work threshold and the clause.

A loop nest of fewer than `PARALLEL_THRESHOLD` iterations runs on one thread. When its size
is known, the decision is made here, not by an `if(...)` clause in the pragma: GCC 12 does not
vectorize a `parallel for simd` loop whose `if` clause is a constant false (mlp's bias + GELU
kernel over 32x256 values called scalar `erff`: 139 us a call against 11 us as a plain `omp
simd` loop, one core), and a region that never forks still costs a call into libgomp.

A symbolic size keeps a run-time clause, `if(parallel: ...)`: an `if` without the modifier
applies to every construct of a combined `parallel for simd` (OpenMP 5.0), so a false one also
runs the loop with one lane. GCC 12 versions the loop on it, and TinyDecoder's dynamic Graph
at batch 4 x 4 tokens ran its bias + GELU kernel (8192 values) scalar: 119 us a call against
8.5 us with the modifier (the static kernel: 6.8 us).
"""

from __future__ import annotations

import sympy

from ember.inductor.ir.indexing import Expr

# Below this many loop iterations a kernel runs on one thread (thread start-up costs more).
PARALLEL_THRESHOLD = 32768


def thread_clause(numel: Expr, size: str) -> str | None:
    """How a loop nest of `numel` iterations (its C++ spelling `size`) is sent to threads:
    None when it is known to be too small (no parallel region at all), "" when it is known to
    be large enough, else an `if(parallel: ...)` clause deciding at run time (on the threads
    only, not on the SIMD lanes)."""
    count = sympy.sympify(numel)
    if count.is_Integer:
        return None if int(count) < PARALLEL_THRESHOLD else ""
    return f" if(parallel: {size} >= {PARALLEL_THRESHOLD}L)"
