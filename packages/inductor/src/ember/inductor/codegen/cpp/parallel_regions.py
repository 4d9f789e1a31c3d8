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

A false run-time clause still calls into libgomp (`GOMP_parallel`, a team of one): every
symbolic kernel of TinyDecoder's dynamic Graph did, where the static Graph's small kernels
open no region at all. `serial_twin` gives such a kernel a serial copy of its loops, chosen by
the same condition at the top, so a small call costs one branch.
"""

from __future__ import annotations

import dataclasses

import sympy

from ember.inductor.codegen.backend import KernelSource
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
    return f"{_CLAUSE}{size} >= {PARALLEL_THRESHOLD}L)"


_CLAUSE = " if(parallel: "
_THREADS = "parallel for "


def serial_twin(kernel: KernelSource) -> KernelSource:
    """`kernel` with its body twice when its threads are decided at run time by one
    condition: `if (condition)` the body with its parallel regions (the clause, now known
    true, left out), else the body with none (`parallel for simd` becomes `simd`, a plain
    `parallel for` goes). A kernel with no run-time clause, or with several conditions,
    is left as it is."""
    lines = kernel.source.split("\n")
    clauses = {line[line.index(_CLAUSE) :] for line in lines if _CLAUSE in line}
    if len(clauses) != 1:
        return kernel
    (clause,) = clauses
    start = next(i for i, line in enumerate(lines) if line.startswith('extern "C" void ')) + 1
    if lines[start] != "{" or lines[-1] != "}":
        return kernel
    body = lines[start + 1 : -1]
    threaded = [line.replace(clause, "") for line in body]
    serial = [_serial(line, clause) for line in body]
    condition = clause[len(_CLAUSE) : -1]
    twins = [
        f"  if ({condition}) {{",
        *(f"  {line}" for line in threaded),
        "  } else {",
        *(f"  {line}" for line in serial if line is not None),
        "  }",
    ]
    source = "\n".join([*lines[: start + 1], *twins, "}"])
    return dataclasses.replace(kernel, source=source)


def _serial(line: str, clause: str) -> str | None:
    """A line of the serial twin: a pragma that opened a parallel region as a SIMD loop's,
    or None where it was a plain `parallel for` (the loops run as written)."""
    if clause not in line:
        return line
    line = line.replace(clause, "")
    if " simd" not in line:
        return None
    return line.replace(_THREADS, "")
