"""Float32 matmul results: a 16-bit product whose float32 cast is a Graph output (through
views: a weight gradient's `t().t()`) becomes one `aten::mm.dtype`; a cast that a kernel reads,
or a product read twice, stays. `aten::mm.dtype` runs on CUDA only: the Graph is checked on
the CPU, the values on a GPU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.passes.float32_matmuls import float32_matmuls
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.prims import TensorSpec
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache


def weight_gradient(grad: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    return (grad.t() @ hidden).t().t().float()  # autocast's weight gradient, cast for the weight


def residual(x: torch.Tensor, w: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    return (x @ w).float() + h  # the cast fuses into the add: the bf16 product stays


def read_twice(grad: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    product = grad.t() @ hidden
    return product.float(), product * 2


def _graph(fn: Callable[..., Any], *inputs: torch.Tensor) -> prims.Graph:
    return decompose(prims.trace(fn, *inputs), DECOMPOSITIONS)


def _bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0)).bfloat16()


def test_a_cast_weight_gradient_becomes_one_float32_matmul() -> None:
    graph = _graph(weight_gradient, _bf16(64, 32), _bf16(64, 48))
    rewritten = float32_matmuls(graph, devices=("cpu",))
    targets = [node.target for node in rewritten.nodes]
    assert "aten::mm.dtype" in targets and "aten::mm.default" not in targets
    assert "prims::convert_element_type" not in targets
    (out,) = [leaf for leaf in rewritten.output_leaves if isinstance(leaf, prims.Ref)]
    spec = rewritten.values()[out.name].spec
    assert isinstance(spec, TensorSpec) and spec.dtype == torch.float32
    assert list(spec.shape) == [32, 48] and tuple(spec.strides) == (48, 1)
    # on the CPU by default nothing changes: cuBLAS writes float32, the CPU's mm does not
    assert float32_matmuls(graph) is graph


@pytest.mark.parametrize("case", ["residual", "read_twice"])
def test_casts_a_kernel_reads_stay(case: str) -> None:
    if case == "residual":
        graph = _graph(residual, _bf16(16, 32), _bf16(32, 8), torch.randn(16, 8))
    else:
        graph = _graph(read_twice, _bf16(64, 32), _bf16(64, 48))
    assert float32_matmuls(graph, devices=("cpu",)) is graph


@pytest.mark.skipif(not torch.cuda.is_available(), reason="aten::mm.dtype needs CUDA")
def test_float32_weight_gradient_matches_eager_on_a_gpu(tmp_path: Path) -> None:
    inputs = (_bf16(256, 128).cuda(), _bf16(256, 64).cuda())
    compiled = compile_graph(
        prims.trace(weight_gradient, *inputs), inputs, cache=ArtifactCache(tmp_path)
    )
    result = compiled(*inputs)
    actual = result[0] if isinstance(result, (tuple, list)) else result
    expected = inputs[0].float().t() @ inputs[1].float()
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-4)
    # eager's bf16 product, upcast, is within bf16 rounding of both
    torch.testing.assert_close(actual, weight_gradient(*inputs), rtol=1e-2, atol=1e-2)
