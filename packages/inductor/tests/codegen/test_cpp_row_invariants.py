"""A value the loops over a row read at one place of the row (a label, a row's saved max or
sum) is read once before them, so GCC vectorizes the loops: a cross-entropy's log-softmax
forward called `logf` for every element (its sum reloaded past the output's stores), and its
backward, whose label select became control flow, ran scalar, `exp` included: 0.78 and 1.15
ms against 0.11 and 0.13 for BERT's 128x1024 values. Checked on GCC's own report."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import ember.prims as prims
from ember.inductor.pipeline import compile_graph

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from cpp_build import needs_compiler, vectorized_loop_lines  # noqa: E402


def _log_softmax(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # its max and sum kept for the backward: stored by the kernel before its output loop
    top = x.amax(-1, keepdim=True)
    total = torch.exp(x - top).sum(-1, keepdim=True)
    return x - top - torch.log(total), top, total


def _cross_entropy_backward(
    log_probabilities: torch.Tensor, labels: torch.Tensor, grad: torch.Tensor
) -> torch.Tensor:
    # log-softmax backward of a cross-entropy: the label's one-hot gradient, less the
    # probabilities times its row sum
    onehot = torch.arange(log_probabilities.shape[-1]) == labels[:, None]
    picked = torch.where(onehot, grad[:, None], 0.0)
    return picked - torch.exp(log_probabilities) * picked.sum(-1, keepdim=True)


def _inputs(width: int, rows: int = 16) -> dict[str, tuple[torch.Tensor, ...]]:
    x = torch.randn(rows, width, generator=torch.Generator().manual_seed(width))
    labels = torch.randint(0, width, (rows,), generator=torch.Generator().manual_seed(1))
    grad = torch.randn(rows, generator=torch.Generator().manual_seed(2))
    return {"log_softmax": (x,), "cross_entropy_backward": (x.log_softmax(-1), labels, grad)}


CASES: dict[str, Callable[..., object]] = {
    "log_softmax": _log_softmax,
    "cross_entropy_backward": _cross_entropy_backward,
}


@needs_compiler
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_row_loop_reading_a_per_row_value_is_vectorized(name: str, tmp_path: Path) -> None:
    # rows enough for an OpenMP region: GCC's alias analysis inside its outlined body is
    # what loses the per-row values (the same kernel on 16 rows ran vectorized)
    fn, inputs = CASES[name], _inputs(1024, rows=64)[name]
    compiled = compile_graph(prims.trace(fn, *inputs), inputs)
    torch.testing.assert_close(compiled(*inputs), fn(*inputs))
    module: str = compiled.module
    assert module.count('extern "C"') == 1
    lines = module.splitlines()
    # the output loop: the kernel's last, after its last `omp simd` pragma
    pragma = max(i for i, line in enumerate(lines, start=1) if "#pragma omp simd" in line)
    vectorized = vectorized_loop_lines(module, tmp_path)
    assert any(pragma <= line < len(lines) for line in vectorized), (pragma, vectorized)


@pytest.mark.parametrize("width", [7, 40, 300])
@pytest.mark.parametrize("name", sorted(CASES))
def test_per_row_values_read_before_the_loops_equal_eager(name: str, width: int) -> None:
    fn, inputs = CASES[name], _inputs(width)[name]
    compiled = compile_graph(prims.trace(fn, *inputs), inputs)
    torch.testing.assert_close(compiled(*inputs), fn(*inputs))
