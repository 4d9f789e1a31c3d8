"""Equal layers of a Triton graph share their kernels: a layer norm whose statistics stay in
registers, and a GEMM template whose product stays in registers, are one definition however
many layers hold them (each definition is compiled, and under max-autotune timed, once);
the vendor path of such a template still computes eager's values."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph, generate
from ember.inductor.templates.gemm_choice import GemmChoice
from ember.prims.config import load
from ember.runtime import ArtifactCache

pytest.importorskip("triton")

CUDA = torch.device("cuda")
WIDTH = 64


def _config() -> InductorConfig:
    return dataclasses.replace(
        load(InductorConfig), max_autotune=True, gemm_templates=True, cache=False
    )


def _layer(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    # a post-norm block (BERT's): linear with bias and GELU (the product stays in the
    # template's registers, the GELU's value is stored), a second linear, then the residual
    # add and a layer norm (its statistics stay in registers)
    h = F.gelu(F.linear(x, w, b))
    return F.layer_norm(x + h @ w, (WIDTH,), g, b)


def _layers(count: int) -> Callable[..., torch.Tensor]:
    def model(x: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        for layer in range(count):
            x = _layer(x, *weights[3 * layer : 3 * layer + 3])
        return x

    return model


def _inputs(count: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, WIDTH, generator=generator)
    weights: list[torch.Tensor] = []
    for _ in range(count):
        weights.append(torch.randn(WIDTH, WIDTH, generator=generator) / 8)
        weights.append(torch.randn(WIDTH, generator=generator))
        weights.append(torch.rand(WIDTH, generator=generator) + 0.5)
    return (x, *weights)


def _kernels(count: int) -> dict[str, Any]:
    """The `KERNELS` table of the graph of `count` layers, generated for CUDA."""
    graph = prims.trace(_layers(count), *_inputs(count))
    module = generate(graph, TritonBackend(max_autotune=True), _config(), CUDA)["module"]
    for node in ast.parse(module).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "KERNELS":
            table: dict[str, Any] = ast.literal_eval(node.value)
            return table
    raise AssertionError("no KERNELS table")


def test_a_repeated_layer_adds_no_kernel() -> None:
    """The first and last layers fuse differently with their neighbours; a fourth layer in
    the middle is the third's kernels again, its template with the product in registers
    and its layer norm with the statistics in registers."""
    three, four = _kernels(3), _kernels(4)
    assert sorted(four) == sorted(three)
    kept = [
        launch
        for launch in four.values()
        if "gemm" in launch and f"p_{launch['gemm']['result']}" not in launch["signature"]
    ]
    assert kept  # a template whose product no argument holds
    assert any("RBLOCK" in launch["configs"][0]["constants"] for launch in four.values())


def test_the_vendor_path_finds_a_kept_product(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vendor path (cuBLAS into a fresh product, then the epilogue kernel reading it)
    finds the product under its position-free name: eager's values, every layer."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    inputs = _inputs(2)
    fn = _layers(2)
    compiled = compile_graph(
        prims.trace(fn, *inputs),
        inputs,
        config=_config(),
        backend=TritonBackend(),
        cache=ArtifactCache(tmp_path),
    )
    kernels = compiled.call.__globals__["kernels"]
    choices = [kernel for kernel in kernels.values() if isinstance(kernel, GemmChoice)]
    assert any(choice.vendor.epilogue is not None for choice in choices)
    for choice in choices:
        choice.launch = choice.vendor  # as if cuBLAS had measured faster
    torch.testing.assert_close(compiled(*inputs), fn(*inputs), rtol=1e-4, atol=1e-4)
