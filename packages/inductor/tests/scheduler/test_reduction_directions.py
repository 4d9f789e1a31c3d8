"""Row and column reductions of one iteration space go to separate kernels on a backend that
vectorizes a kernel in one direction (`ONE_REDUCTION_DIRECTION`), and values stay eager's.

A layer norm's backward sums along each row (the input gradient) and down each column (the
weight and bias gradients). Over a square space (BERT's 2x64 tokens x 128 features) the
loop sizes matched and the column sums joined the row kernel, where they read memory a row
apart in scalar loops; alone, the C++ generator's column blocks read along rows into packed
double accumulators, vectorized.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

import ember.prims as prims
from ember.inductor.codegen.backend import ONE_REDUCTION_DIRECTION
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.codegen.cpp.compiler import COMPILER
from ember.inductor.pipeline import compile_graph

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from cpp_build import (  # noqa: E402
    vectorization_report,
)


def _norm_grads(
    g: torch.Tensor, x: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    xhat = (x - x.mean(-1, keepdim=True)) * torch.rsqrt(x.var(-1, keepdim=True) + 1e-5)
    gw = g * w
    dx = gw - gw.mean(-1, keepdim=True) - xhat * (gw * xhat).mean(-1, keepdim=True)
    return dx, (g * xhat).sum(0), g.sum(0)


class _BothDirections(CppBackend):
    """The C++ backend without the capability: fusion by loop sizes alone."""

    capabilities = CppBackend.capabilities - {ONE_REDUCTION_DIRECTION}


def _inputs(rows: int, columns: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(rows + columns)
    return (
        torch.randn(rows, columns, generator=generator),
        torch.randn(rows, columns, generator=generator),
        torch.randn(columns, generator=generator),
    )


@pytest.mark.parametrize("shape", [(128, 128), (48, 48), (37, 37), (64, 96)])
def test_row_and_column_reductions_equal_eager(shape: tuple[int, int]) -> None:
    inputs = _inputs(*shape)
    compiled = compile_graph(prims.trace(_norm_grads, *inputs), inputs)
    for value, expected in zip(compiled(*inputs), _norm_grads(*inputs), strict=True):
        torch.testing.assert_close(value, expected, rtol=1e-4, atol=1e-4)


def _strided_loops(module: str, directory: Path) -> int:
    """Loops GCC left scalar for want of a vector type: reads a row apart (the build's own
    flags, its report of missed loops)."""
    return sum(
        "not vectorized: no vectype" in line
        for line in vectorization_report(module, directory, "missed")
    )


@pytest.mark.skipif(shutil.which(COMPILER) is None, reason="no C++ compiler")
def test_square_column_sums_leave_the_row_kernel_and_vectorize(tmp_path: Path) -> None:
    inputs = _inputs(128, 128)
    graph = prims.trace(_norm_grads, *inputs)
    separate = compile_graph(graph, inputs)
    fused = compile_graph(graph, inputs, backend=_BothDirections())
    for a, b in zip(separate(*inputs), fused(*inputs), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert _strided_loops(fused.module, tmp_path) > 0  # what the capability avoids
    assert _strided_loops(separate.module, tmp_path) == 0
