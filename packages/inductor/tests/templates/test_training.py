"""GEMM templates in a training step under Triton's interpreter: an MLP block's forward and
backward Graphs (ember-autodiff) compiled with templates; the backward's products read
transposed operands (`t(grad) @ x`) and fuse the GELU backward. Values and gradients against
eager."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.autodiff import aot
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph
from ember.inductor.templates.gemm_choice import GemmChoice
from ember.prims.config import load
from ember.runtime import ArtifactCache

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("training-cache")))


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def block(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
          b2: torch.Tensor) -> torch.Tensor:  # fmt: skip
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2) + x


def test_mlp_block_training_step(cache: ArtifactCache, interpreter: None) -> None:
    generator = torch.Generator().manual_seed(0)
    shapes = [(13, 24), (40, 24), (40,), (24, 40), (24,)]
    leaves = [torch.randn(*shape, generator=generator) / 4 for shape in shapes]
    inputs = [leaf.clone().requires_grad_() for leaf in leaves]
    eager_inputs = [leaf.clone().requires_grad_() for leaf in leaves]
    config = dataclasses.replace(load(InductorConfig), gemm_templates=True, cache=False)
    choices: list[int] = []

    def compiler(graph: prims.Graph, example_inputs: Any) -> Any:
        compiled = compile_graph(graph, example_inputs, config=config, backend=TritonBackend(),
                                 cache=cache)  # fmt: skip
        kernels = compiled.call.__globals__["kernels"].values()
        choices.append(sum(isinstance(k, GemmChoice) for k in kernels))
        return compiled

    graph = prims.trace(block, *inputs)
    step = aot(graph, inputs, compiler, compiler)
    out = step(*inputs)
    expected = block(*eager_inputs)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    grad = torch.randn(expected.shape, generator=generator)
    out.backward(grad)
    expected.backward(grad)
    for got, want in zip(inputs, eager_inputs):
        assert got.grad is not None and want.grad is not None
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)
    assert len(choices) == 2 and choices[0] >= 2 and choices[1] >= 3, choices
