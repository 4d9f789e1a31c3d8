"""Float32 sums over a row: float lanes, each lane's chunks added into its own double.

A float32 sum accumulates in double (`ops.accumulator_dtype`), but converting every value
halved the vector width, so the row is summed in float by chunks of `SUM_CHUNK` values, each
SIMD lane adding 16 of them, and a chunk's lanes then go into doubles. As an `omp simd
reduction(+:part)` per chunk, GCC 12 combined a chunk's 16 lanes one after another (16
dependent scalar `vaddss` from the stack: the reduction may not be reassociated without
-ffast-math) before the double add, four times a row of 1024: the softmax micro-benchmark's
sum loop spent ~15% of the kernel there (C++ harness, one core, min of 150 interleaved
calls: 2.56 -> 2.06 ms with one chunk a row). Here the lanes are explicit: the row runs in
blocks of `SUM_LANES` values, an `omp simd` loop over a block adding value `l` into
`part[l]`; at the end of a chunk `part` goes into `SUM_LANES` double accumulators
(vectorized: `vcvtps2pd` and `vaddpd`), which are combined once, after the row. Each lane
still adds 16 values of a chunk in float, so the result is as accurate as before. A row
whose length is not a multiple of `SUM_LANES` ends with an `omp simd reduction` loop over
its last values, added into the double accumulator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

from ember.inductor.ir.indexing import index_var
from ember.inductor.scheduler.fusion import Member

if TYPE_CHECKING:
    from ember.inductor.codegen.cpp.kernel import CppKernel

# Values a lane adds in float before its chunk goes into its double accumulator.
SUM_CHUNK = 256
# Lanes of a block: one AVX-512 vector of float32 (two AVX2 vectors).
SUM_LANES = 16


def declare_lanes(cpp: CppKernel, accumulator: str) -> str:
    """Declare (zeroed) the double lane accumulators of `accumulator`; their name."""
    lanes = f"{accumulator}_lanes"
    cpp.line(f"double {lanes}[{SUM_LANES}] = {{}};")
    return lanes


def combine_lanes(cpp: CppKernel, accumulator: str, lanes: str) -> None:
    """Add the lane accumulators into `accumulator`, after every loop of the sum."""
    lane = f"{lanes}_l"
    with cpp.block(f"for (int64_t {lane} = 0; {lane} < {SUM_LANES}L; ++{lane})"):
        cpp.line(f"{accumulator} = {accumulator} + {lanes}[{lane}];")


def generate_row_sum(cpp: CppKernel, member: Member, accumulator: str, lanes: str) -> None:
    """The loops of a float32 sum over the kernel's last reduction loop: whole blocks into
    `lanes`, the rest of the row into the double `accumulator`."""
    kernel = cpp.kernel
    last = len(kernel.inner) - 1
    extent = sympy.sympify(kernel.inner[last])
    size = cpp.size(extent)
    variable = index_var("r", last)
    if extent.is_Integer:
        whole = int(extent) // SUM_LANES * SUM_LANES
        blocks, tail = f"{whole}L", int(extent) > whole
    else:
        whole = None
        blocks, tail = f"(({size}) / {SUM_LANES}L * {SUM_LANES}L)", True
    saved = set(cpp.saved)
    if whole != 0:
        _blocks(cpp, member, variable, blocks, lanes)
    if tail:
        cpp.saved = set(saved)  # the rest of the row writes its own part of the saved rows
        part = f"{accumulator}_rest"
        cpp.line(f"float {part} = 0.0f;")
        cpp.line(f"#pragma omp simd reduction(+:{part})")
        with cpp.block(f"for (int64_t {variable} = {blocks}; {variable} < {size}; ++{variable})"):
            cpp.line(f"{part} = {part} + {cpp.row_value(member)};")
        cpp.line(f"{accumulator} = {accumulator} + {part};")


def _blocks(cpp: CppKernel, member: Member, variable: sympy.Symbol, end: str, lanes: str) -> None:
    chunk, block, lane = f"{variable}_chunk", f"{variable}_block", f"{variable}_lane"
    part = f"{lanes}_part"
    with cpp.block(f"for (int64_t {chunk} = 0; {chunk} < {end}; {chunk} += {SUM_CHUNK}L)"):
        cpp.line(f"float {part}[{SUM_LANES}] = {{}};")
        chunk_end = f"std::min<int64_t>({chunk} + {SUM_CHUNK}L, {end})"
        with cpp.block(
            f"for (int64_t {block} = {chunk}; {block} < {chunk_end}; {block} += {SUM_LANES}L)"
        ):
            cpp.line("#pragma omp simd")
            with cpp.block(f"for (int64_t {lane} = 0; {lane} < {SUM_LANES}L; ++{lane})"):
                cpp.line(f"int64_t {variable} = {block} + {lane};")
                cpp.line(f"{part}[{lane}] = {part}[{lane}] + {cpp.row_value(member)};")
        cpp.line("#pragma omp simd")
        with cpp.block(f"for (int64_t {lane} = 0; {lane} < {SUM_LANES}L; ++{lane})"):
            cpp.line(f"{lanes}[{lane}] = {lanes}[{lane}] + {part}[{lane}];")
