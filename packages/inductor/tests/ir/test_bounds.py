"""Index ranges against storage sizes: interval bounds with truncating division, `masked`
conditions, exact evaluation where intervals cannot decide, and the pipeline's check that
stops a kernel reading outside its buffer (with the kernel, the access and the user's line
in the message)."""

from __future__ import annotations

import dataclasses

import pytest
import sympy
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.codegen.bounds import check_bounds, kernel_violations
from ember.inductor.errors import OutOfBoundsError
from ember.inductor.ir import body
from ember.inductor.ir.bounds import Access, accesses, index_range, out_of_bounds
from ember.inductor.ir.indexing import FloorDiv, ModularIndexing, index_var
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS
from ember.inductor.scheduler.fusion import Kernel, schedule
from ember.prims.decompositions import decompose

x0, x1, x2 = (index_var("x", i) for i in range(3))


def test_interval_bounds_of_linear_and_divided_indices() -> None:
    box = {x0: (0, 5), x1: (0, 9)}
    assert index_range(10 * x0 + x1, box) == (0, 59)
    assert index_range(10 * x0 - x1 + 3, box) == (-6, 53)
    assert index_range(FloorDiv(10 * x0 + x1, 7), box) == (0, 8)
    assert index_range(ModularIndexing(x1, 1, 4), box) == (0, 3)
    assert index_range(ModularIndexing(x1, 1, 16), box) == (0, 9)
    # truncating remainder of a negative operand is negative, as C and Triton compute it
    assert index_range(ModularIndexing(x1 - 13, 1, 4), box) == (-3, 0)


def test_a_masked_load_is_judged_where_its_condition_holds() -> None:
    """A pad's load `x1 - 2` runs only where 2 <= x1 < 8: in bounds of 6 elements."""
    position = body.index_expr(x1, torch.int64)
    inside = body.binary(
        "logical_and",
        body.binary("ge", position, body.index_expr(sympy.Integer(2), torch.int64)),
        body.binary("lt", position, body.index_expr(sympy.Integer(8), torch.int64)),
    )
    load = body.load("in0", x1 - 2, torch.float32)
    tree = body.masked(inside, load, 0.0)
    found = accesses([tree])
    assert [a.guards for a in found] == [(inside,)]
    ranges = {x1: sympy.Integer(10)}
    assert out_of_bounds(found, ranges, {"in0": 6}) == []
    unguarded = [dataclasses.replace(found[0], guards=())]
    [violation] = out_of_bounds(unguarded, ranges, {"in0": 6})
    assert violation.reached == (-2, 7)


def test_exact_evaluation_decides_what_intervals_cannot() -> None:
    # x0 - 4*(x0 // 4) is x0 % 4: intervals say -12..15, the loop reaches 0..3
    index = x0 - 4 * FloorDiv(x0, 4)
    assert index_range(index, {x0: (0, 15)}) == (-12, 15)
    assert out_of_bounds([Access("buf", "load", index)], {x0: sympy.Integer(16)}, {"buf": 4}) == []
    # the rolled-window read Swin compiled to before the index fix: negative under its mask
    rolled = 3 * ModularIndexing(3 * x1 + x2 - 54, 3, 4) + x2
    guard = body.binary(
        "ge", body.index_expr(x1, torch.int64), body.index_expr(sympy.Integer(2), torch.int64)
    )
    access = Access("in0", "load", rolled, (guard,))
    ranges = {x1: sympy.Integer(8), x2: sympy.Integer(3)}
    [violation] = out_of_bounds([access], ranges, {"in0": 192})
    assert violation.reached[0] < 0


def test_exact_evaluation_takes_independent_variables_one_at_a_time() -> None:
    """`x0 % 4 + 16 * (x1 % 4)` over 4096 x 4096 points (past the enumeration limit as one
    box) is decided from 4096 + 4096: its terms share no variable, so their extremes add."""
    index = x0 - 4 * FloorDiv(x0, 4) + 16 * (x1 - 4 * FloorDiv(x1, 4))
    ranges = {x0: sympy.Integer(4096), x1: sympy.Integer(4096)}
    access = Access("buf", "load", index)
    assert out_of_bounds([access], ranges, {"buf": 52}) == []
    [violation] = out_of_bounds([access], ranges, {"buf": 40})
    assert violation.reached == (0, 51)


def _scheduled(fn, *inputs):  # type: ignore[no-untyped-def]
    program = lower_graph(decompose(prims.trace(fn, *inputs), DECOMPOSITIONS))
    return program, schedule(program)


def test_kernels_of_real_indexing_are_in_bounds() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        rolled = torch.roll(x, shifts=(2, -1), dims=(1, 2))
        padded = F.pad(rolled[:, 1:, :], (1, 2, 0, 3))
        return torch.cat([padded, y], 1).sum(-1)

    program, scheduled = _scheduled(fn, torch.randn(2, 6, 5), torch.randn(2, 4, 8))
    kernels = [k for k in scheduled if isinstance(k, Kernel)]
    assert kernels and all(kernel_violations(k, program) == [] for k in kernels)
    check_bounds(scheduled, program)


def test_a_kernel_reading_past_its_buffer_stops_the_compile() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.exp() + 1

    program, scheduled = _scheduled(fn, torch.randn(4, 8))
    [kernel] = [k for k in scheduled if isinstance(k, Kernel)]
    member = kernel.members[0]
    shifted = body.map_indices(member.body, lambda e: e + 1)  # one element too far
    kernel.members[0] = dataclasses.replace(member, body=shifted)
    [violation] = kernel_violations(kernel, program)
    assert violation.kind == "load" and violation.reached == (1, 32) and violation.extent == 32
    with pytest.raises(OutOfBoundsError, match=r"(?s)reaches elements 1\.\.32.*test_bounds\.py"):
        check_bounds(scheduled, program)
