"""`prims::scatter` with one index per line as a pointwise select (nll_loss's backward): no
zero matrix and no fallback call, values equal to eager's; other scatters fall back."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.ir.indexing import product
from ember.inductor.ir.program import ExternNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("scatter-select-cache")))


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    log_probs = torch.log_softmax(torch.randn(6, 50, generator=generator), -1)
    target = torch.randint(0, 50, (6,), generator=generator)
    target[2] = -100  # ignored
    return log_probs, target, torch.tensor(2.5)


def nll_loss_backward(log_probs: torch.Tensor, target: torch.Tensor, grad: torch.Tensor) -> Any:
    total = (target != -100).sum().to(log_probs.dtype)
    gradient = torch.ops.aten.nll_loss_backward(grad, log_probs, target, None, 1, -100, total)
    # log_softmax's backward reads it twice (a row sum and the subtraction)
    return gradient - torch.exp(log_probs) * gradient.sum(1, keepdim=True)


def scatter_rows(a: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return a.scatter(1, index, src) * 2


def scatter_many(a: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return a.scatter(0, index, src) + 1


def _check(fn: Callable[..., Any], cache: ArtifactCache, *inputs: torch.Tensor) -> None:
    compiled = compile_graph(prims.trace(fn, *inputs), inputs, cache=cache)
    torch.testing.assert_close(compiled(*inputs), fn(*inputs))


def test_nll_loss_backward_is_one_select_without_a_zero_matrix(cache: ArtifactCache) -> None:
    inputs = _inputs()
    graph = decompose(prims.trace(nll_loss_backward, *inputs), DECOMPOSITIONS)
    program = lower_graph(graph)
    assert not [n for n in program.nodes if isinstance(n, ExternNode)]
    outputs = {arg.storage for arg in program.outputs if hasattr(arg, "storage")}
    wide = [
        name
        for name, storage in program.storages.items()
        if storage.layout is not None
        and name not in outputs
        and int(product(storage.layout.size)) == 6 * 50
    ]
    assert wide == []  # neither the zeros nor the scattered gradient is ever stored
    _check(nll_loss_backward, cache, *inputs)


def test_a_scatter_into_a_tensor_matches_eager(cache: ArtifactCache) -> None:
    generator = torch.Generator().manual_seed(1)
    a = torch.randn(4, 7, generator=generator)
    index = torch.randint(0, 7, (4, 1), generator=generator)
    src = torch.randn(4, 1, generator=generator)
    _check(scatter_rows, cache, a, index, src)


def test_a_scatter_of_several_elements_per_line_falls_back_and_matches_eager(
    cache: ArtifactCache,
) -> None:
    a = torch.zeros(5, 3)
    index = torch.tensor([[0, 1, 2], [4, 3, 0]])
    src = torch.arange(6.0).reshape(2, 3)
    _check(scatter_many, cache, a, index, src)
