"""Reductions over a strided dimension, vectorized across the contiguous outer one.

`x.sum(dim=0)` of a row-major matrix reads its reduction loop at a stride of a whole row, so
the per-output loop cannot use SIMD loads. Here the last outer loop is cut into blocks of
`lanes` outputs; each reduction keeps an array of `lanes` accumulators and, for every step
of the reduction loops, updates all of them in one `omp simd` loop over contiguous inputs.
Accumulation order per output is the scalar kernel's (same accumulator dtype, same order),
so the results are bit-identical; the remainder of the last outer loop runs the scalar code.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import sympy

from ember.inductor.codegen.cpp.half_precision import HALF_TYPES, round_to
from ember.inductor.codegen.cpp.ops import CPP_TYPES, accumulator_dtype, literal, reduction_init
from ember.inductor.codegen.cpp.parallel_regions import thread_clause
from ember.inductor.ir.indexing import Expr, index_var
from ember.inductor.scheduler.fusion import Member

if TYPE_CHECKING:
    from ember.inductor.codegen.cpp.kernel import CppKernel

# Outputs per block: on one core of the 2-core CI machine a 1024x4096 sum over dim 0 took
# 2.10 / 1.56 / 1.23 / 0.56 ms at 16 / 32 / 64 / 128 lanes (eager 0.87-1.03 ms): each pass
# down the strided rows reads `lanes` contiguous floats, so wider blocks use more of each line.
MAX_LANES = 128
MIN_LANES = 16
LANE_REDUCTIONS = frozenset({"sum", "max", "min"})


def outer_lanes(cpp: CppKernel) -> int | None:
    """The block width if the kernel's reductions read contiguously along its last outer loop
    and no matrix contiguously along its innermost reduction loop (and hold nothing the lanes
    cannot: inner loops, indirect or atomic stores, arg-reductions); None to keep the scalar
    layout."""
    kernel = cpp.kernel
    if not kernel.outer or not kernel.inner:
        return None
    reductions = [m for m in kernel.members if m.level == "reduction"]
    if not reductions or any(m.node.reduction_type not in LANE_REDUCTIONS for m in reductions):
        return None
    if any(m.level == "inner" or m.store_mode or m.store_indirect for m in kernel.members):
        return None
    last = index_var("x", len(kernel.outer) - 1)
    innermost = index_var("r", len(kernel.inner) - 1)
    along_outer = False
    for member in kernel.members:
        for load in member.loads():
            storage, index, indirect = load.args
            if indirect:
                return None
            if str(storage) in kernel.local_buffers:
                continue
            assert isinstance(index, sympy.Expr)
            if sympy.diff(index, innermost) == 1 and sympy.diff(index, last) != 0:
                return None  # contiguous along the reduction: the row layout vectorizes it
            # (a vector indexed by the reduction alone, a layer norm's per-token mean in its
            # weight gradient, is one value for every lane)
            if member.level == "reduction" and sympy.diff(index, last) == 1:
                along_outer = True
    if not along_outer:
        return None
    size = kernel.outer[-1]
    if isinstance(size, sympy.Integer):
        if int(size) < MIN_LANES:
            return None
        return min(MAX_LANES, 1 << int(math.log2(int(size))))
    return MAX_LANES


def generate_outer_lanes(
    cpp: CppKernel, outer_vars: list[sympy.Symbol], numel: Expr, lanes: int
) -> None:
    """Emit the blocked loops (threads over the blocks and the other outer loops), then the
    remainder of the last outer loop with the scalar layout."""
    kernel = cpp.kernel
    last = str(outer_vars[-1])
    block = f"{last}_block"
    size = cpp.size(kernel.outer[-1])
    whole = f"(({size}) - ({size}) % {lanes}L)"
    clause = thread_clause(numel, cpp.size(numel))
    collapse = f" collapse({len(kernel.outer)})" if len(kernel.outer) > 1 else ""
    if clause is not None:
        cpp.line(f"#pragma omp parallel for{collapse}{clause}")
    for variable, bound in zip(outer_vars[:-1], kernel.outer[:-1]):
        cpp.line(f"for (int64_t {variable} = 0; {variable} < {cpp.size(bound)}; ++{variable})")
    with cpp.block(f"for (int64_t {block} = 0; {block} < {whole}; {block} += {lanes}L)"):
        lane_loop = f"for (int64_t {last} = {block}; {last} < {block} + {lanes}L; ++{last})"
        lane = f"{last} - {block}"
        for member in kernel.members:
            if member.level == "reduction":
                _lane_reduction(cpp, member, lanes, lane_loop, lane)
            else:
                names: dict[int, str] = {}
                _lane_store(
                    cpp,
                    member,
                    lanes,
                    lane_loop,
                    lane,
                    functools.partial(cpp.value, member.body, names),
                )
    collapse = f" collapse({len(kernel.outer) - 1})" if len(kernel.outer) > 2 else ""
    if len(kernel.outer) > 1 and clause is not None:
        cpp.line(f"#pragma omp parallel for{collapse}{clause}")
    for variable, bound in zip(outer_vars[:-1], kernel.outer[:-1]):
        cpp.line(f"for (int64_t {variable} = 0; {variable} < {cpp.size(bound)}; ++{variable})")
    with cpp.block(f"for (int64_t {last} = {whole}; {last} < {size}; ++{last})"):
        cpp._members(parallel_outer=True)


def _lane_reduction(cpp: CppKernel, member: Member, lanes: int, lane_loop: str, lane: str) -> None:
    reduction_type = member.node.reduction_type
    assert reduction_type is not None
    value_dtype = member.body.dtype
    accumulator_type = accumulator_dtype(reduction_type, value_dtype)
    accumulator_cpp = CPP_TYPES[accumulator_type]
    accumulator = cpp.fresh("acc")
    nans = (
        f"{accumulator}_nan" if reduction_type != "sum" and value_dtype.is_floating_point else None
    )
    cpp.line(f"{accumulator_cpp} {accumulator}[{lanes}];")
    if nans is not None:
        cpp.line(f"{CPP_TYPES[value_dtype]} {nans}[{lanes}];")
    cpp.line("#pragma omp simd")
    with cpp.block(lane_loop):
        cpp.line(f"{accumulator}[{lane}] = {reduction_init(reduction_type, accumulator_type)};")
        if nans is not None:
            cpp.line(f"{nans}[{lane}] = {literal(0, value_dtype)};")
    headers = cpp._reduction_loops("")
    for header in headers:
        cpp.line(header + " {")
        cpp.depth += 1
    cpp.line("#pragma omp simd")
    with cpp.block(lane_loop):
        value = cpp.value(member.body, {})
        current = f"{accumulator}[{lane}]"
        if reduction_type == "sum":
            cpp.line(f"{current} = {current} + {value};")
        else:
            keep = ">" if reduction_type == "max" else "<"
            cpp.line(f"{current} = ({current} {keep} {value}) ? {current} : {value};")
        if nans is not None:
            nan = f"{nans}[{lane}]"
            cpp.line(f"{nan} = ({value} != {value}) ? {value} : {nan};")
    for _ in headers:
        cpp.depth -= 1
        cpp.line("}")
    result = f"{accumulator}[{lane}]"
    if nans is not None:
        nan = f"{nans}[{lane}]"
        result = f"(({nan} != {nan}) ? {nan} : {result})"
    dtype = CPP_TYPES[member.node.dtype]
    _lane_store(cpp, member, lanes, lane_loop, lane, lambda: f"static_cast<{dtype}>({result})")


def _lane_store(
    cpp: CppKernel, member: Member, lanes: int, lane_loop: str, lane: str, value: Callable[[], str]
) -> None:
    """Store `value()` (emitted inside the lane loop) for every lane: to memory, or to a
    `lanes`-wide array standing for a buffer local to the kernel."""
    storage = member.node.storage
    local = storage in cpp.kernel.local_buffers
    if local:
        cpp.line(f"{CPP_TYPES[member.node.dtype]} {storage}_v[{lanes}];")
    cpp.line("#pragma omp simd")
    with cpp.block(lane_loop):
        if local:
            dtype = member.node.dtype  # a 16-bit buffer holds what eager would have stored
            stored = round_to(dtype, value()) if dtype in HALF_TYPES else value()
            cpp.line(f"{storage}_v[{lane}] = {stored};")
        else:
            cpp._store(member, value(), {})
    if local:
        cpp.locals[storage] = f"{storage}_v[{lane}]"
