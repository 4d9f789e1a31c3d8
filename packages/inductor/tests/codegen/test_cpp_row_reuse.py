"""A row value a sum computes is computed once for every later loop over the row that needs
it: the output loop and later sums (a layer norm's variance after its mean), and the values
stay eager's.

A layer norm after a GELU or after dropout and a residual add (BERT's blocks) computed its
input three times, once for the mean, once for the variance, once for the output: three
`erf` calls or three Philox draws an element. Counted in the kernel's source: GCC unrolls the
sums' loops over 16-value blocks (row_sums.py), so one call there is several call sites.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.pipeline import compile_graph

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from cpp_build import needs_compiler  # noqa: E402


def _gelu_layer_norm(t: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(F.gelu(t), (t.shape[-1],), weight, bias)


@needs_compiler
def test_a_layer_norm_of_a_gelu_calls_erf_in_one_loop() -> None:
    x = torch.randn(8, 1024, generator=torch.Generator().manual_seed(0))
    weight = torch.randn(1024, generator=torch.Generator().manual_seed(1))
    bias = torch.randn(1024, generator=torch.Generator().manual_seed(2))
    compiled = compile_graph(prims.trace(_gelu_layer_norm, x, weight, bias), (x, weight, bias))
    torch.testing.assert_close(compiled(x, weight, bias), _gelu_layer_norm(x, weight, bias))
    kernel = compiled.module.split('extern "C"', 1)[1]  # type: ignore[attr-defined]
    assert kernel.count("erf(") == 1, kernel


def _dropout_residual_norm(
    t: torch.Tensor, residual: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    dropped = F.dropout(t, 0.1, training=True)
    return dropped, F.layer_norm(dropped + residual, (t.shape[-1],))


@pytest.mark.parametrize("width", [7, 128, 300])
def test_dropout_residual_layer_norm_normalizes_the_numbers_it_drew(width: int) -> None:
    # the mean, the variance and the output read one draw per element: the normalized
    # values are eager's layer norm of the dropout output the same kernel stored
    x = torch.randn(32, width, generator=torch.Generator().manual_seed(width))
    residual = torch.randn(32, width, generator=torch.Generator().manual_seed(1))
    compiled = compile_graph(prims.trace(_dropout_residual_norm, x, residual), (x, residual))
    torch.manual_seed(0)
    dropped, normalized = compiled(x, residual)
    kept = dropped != 0
    assert 0.8 < kept.float().mean().item() < 0.97
    torch.testing.assert_close(dropped[kept], x[kept] / 0.9)
    torch.testing.assert_close(normalized, F.layer_norm(dropped + residual, (width,)))


def test_a_mean_and_variance_of_an_exponential_equal_eager() -> None:
    def fn(t: torch.Tensor) -> torch.Tensor:
        e = torch.exp(t)
        mean = e.mean(-1, keepdim=True)
        return ((e - mean) ** 2).mean(-1, keepdim=True) + e * 0.5

    x = torch.randn(6, 333, generator=torch.Generator().manual_seed(0))
    x[2, 7] = float("nan")
    compiled = compile_graph(prims.trace(fn, x), (x,))
    torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)
