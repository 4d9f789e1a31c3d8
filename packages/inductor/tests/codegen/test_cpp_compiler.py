"""The C++ build's flags keep the kernels' loops ones GCC vectorizes, and values eager's.

Checked on the compiler's own report (`-fopt-info-vec-optimized`) with the build's flags:
GCC 12 sank the exponential of `where(mask, 0, exp(x) / s)` into the branch of the select
that reads it, and a loop with a call in a conditional block is not if-converted ("control
flow in loop"): the attention probabilities' kernels of BERT's training step ran scalar.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

import ember.prims as prims
from ember.inductor.codegen.cpp.compiler import COMPILER
from ember.inductor.pipeline import compile_graph

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from cpp_build import (  # noqa: E402
    vectorized_loop_lines,
)


def _masked_probabilities(scores: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    # a softmax backward's or a dropout's view of masked attention rows
    return torch.where(masked, 0.0, torch.exp(scores - 1.0) / 3.0)


@pytest.mark.skipif(shutil.which(COMPILER) is None, reason="no C++ compiler")
def test_a_select_between_zero_and_an_exponential_is_a_vectorized_loop(tmp_path: Path) -> None:
    scores = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    scores[3, 5] = float("nan")
    scores[4, :] = float("-inf")
    masked = torch.rand(64, 1, generator=torch.Generator().manual_seed(1)) > 0.5
    compiled = compile_graph(prims.trace(_masked_probabilities, scores, masked), (scores, masked))
    torch.testing.assert_close(
        compiled(scores, masked), _masked_probabilities(scores, masked), equal_nan=True
    )
    module: str = compiled.module
    lines = module.splitlines()
    # the kernel's SIMD loop: the `for` after the last `omp simd` pragma of the kernel
    pragma = max(i for i, line in enumerate(lines, start=1) if "#pragma omp simd" in line)
    vectorized = vectorized_loop_lines(module, tmp_path)
    assert any(pragma <= line <= pragma + 4 for line in vectorized), (pragma, vectorized)
