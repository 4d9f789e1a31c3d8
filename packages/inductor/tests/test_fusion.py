"""Fusion: pointwise chains, reductions with their prologues and epilogues, and horizontal
fusion become single kernels; results match eager."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import ember.prims as prims
from ember.inductor.pipeline import compile_graph
from ember.runtime import ArtifactCache


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("cache")))


def chain_of_ten(x: torch.Tensor) -> torch.Tensor:
    y = x * 2.0 + 1.0
    y = torch.sin(y) * torch.cos(y)
    y = torch.relu(y - 0.5)
    y = torch.exp(-y) / (y + 3.0)
    return torch.tanh(y)


def test_pointwise_chain_of_ten_ops_is_one_kernel(cache: ArtifactCache) -> None:
    x = torch.randn(64, 33, generator=torch.Generator().manual_seed(0))
    graph = prims.trace(chain_of_ten, x)
    compiled = compile_graph(graph, (x,), cache=cache)
    assert compiled.kernel_count == 1
    # vector libm (libmvec) is within 4 ulp of torch's own
    torch.testing.assert_close(compiled(x), chain_of_ten(x), rtol=1e-5, atol=1e-6)


def softmax_and_layer_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(torch.softmax(x, -1) * 3, (x.shape[-1],), w, w)


def test_reductions_fuse_with_prologue_and_epilogue(cache: ArtifactCache) -> None:
    x, w = torch.randn(16, 40), torch.randn(40)
    compiled = compile_graph(prims.trace(softmax_and_layer_norm, x, w), (x, w), cache=cache)
    assert compiled.kernel_count == 1  # max, sum, mean, var and the output, one loop nest
    torch.testing.assert_close(compiled(x, w), softmax_and_layer_norm(x, w), rtol=1e-4, atol=1e-5)


def two_independent(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (x * 2).sum(1), (y + 1).amax(1)


def test_independent_reductions_over_one_space_fuse_horizontally(cache: ArtifactCache) -> None:
    x, y = torch.randn(8, 50), torch.randn(8, 50)
    compiled = compile_graph(prims.trace(two_independent, x, y), (x, y), cache=cache)
    assert compiled.kernel_count == 1
    torch.testing.assert_close(compiled(x, y), two_independent(x, y), rtol=1e-5, atol=1e-5)


def transposed_add(x: torch.Tensor) -> torch.Tensor:
    return x.t() + x.sum(0, keepdim=True).t()


def test_permuted_reads_and_broadcasts_match_eager(cache: ArtifactCache) -> None:
    x = torch.randn(6, 5)
    compiled = compile_graph(prims.trace(transposed_add, x), (x,), cache=cache)
    torch.testing.assert_close(compiled(x), transposed_add(x), rtol=1e-5, atol=1e-5)
