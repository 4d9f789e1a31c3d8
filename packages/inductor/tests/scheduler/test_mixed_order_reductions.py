"""Mixed-order reductions (`scheduler/mixed_order_reductions.py`): a norm backward's split
weight-gradient sum computed inside its row reduction. Under the Triton interpreter against
eager autograd's gradients (RMSNorm and LayerNorm, hidden sizes that are not powers of two,
chunks re-split into programs of a few rows), the cases that must keep two kernels, and the
kernels built for sm_90."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.config import InductorConfig
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.inductor.scheduler.fusion import schedule
from ember.inductor.scheduler.mixed_order_reductions import (
    MixedOrderKernel,
    combine_mixed_order_reductions,
)
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache

pytest.importorskip("triton")


def rms_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm's input and weight gradients (y = x * rstd * weight, rstd per row)."""
    normed = x * rstd
    dw = (dy * normed).sum(0)
    g = dy * weight
    dx = rstd * (g - normed * (g * normed).mean(1, keepdim=True))
    return dx, dw


def layer_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """LayerNorm's input, weight and bias gradients: two column sums beside the row sums."""
    xhat = (x - mean) * rstd
    dw = (dy * xhat).sum(0)
    db = dy.sum(0)
    g = dy * weight
    dx = rstd * (g - g.mean(1, keepdim=True) - xhat * (g * xhat).mean(1, keepdim=True))
    return dx, dw, db


def bf16_rms_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """As Llama's under autocast: a bf16 gradient, float32 residual stream and sums."""
    return rms_norm_backward(dy.float(), x, weight, rstd)


def embedding_rms_norm_backward(
    dy: torch.Tensor, tokens: torch.Tensor, table: torch.Tensor, delta: torch.Tensor,
    weight: torch.Tensor, rstd: torch.Tensor, dy2: torch.Tensor, delta2: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """As Llama's first norm: its input gathered from a token table and two residual
    branches, its gradient from two branches, and its input gradient added into the table's
    gradient (atomic adds, in a kernel of their own here)."""
    x = table[tokens] + delta + delta2
    dx, dw = rms_norm_backward(dy + dy2, x, weight, rstd)
    return dx.new_zeros(table.shape).index_add(0, tokens, dx), dw


def column_sum_of_other_map(
    dy: torch.Tensor, x: torch.Tensor, other: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A column sum that reads a map the row sum does not: no bytes to save, two kernels."""
    return (dy * x).sum(1), (other * x).sum(0)


def _rms_inputs(rows: int, features: int, bf16: bool = False) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, features, generator=generator) * 2 + 0.5
    dy = torch.randn(rows, features, generator=generator)
    weight = torch.randn(features, generator=generator)
    rstd = torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6)
    return (dy.to(torch.bfloat16) if bf16 else dy), x, weight, rstd


def _layer_norm_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2100, 131, generator=generator) * 3 - 1
    dy = torch.randn(2100, 131, generator=generator)
    weight = torch.randn(131, generator=generator)
    mean = x.mean(1, keepdim=True)
    rstd = torch.rsqrt(x.var(1, unbiased=False, keepdim=True) + 1e-5)
    return dy, x, weight, mean, rstd


def _embedding_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 50, (2048,), generator=generator)
    table = torch.randn(50, 129, generator=generator)
    delta = torch.randn(2048, 129, generator=generator)
    dy = torch.randn(2048, 129, generator=generator)
    weight = torch.randn(129, generator=generator)
    dy2 = torch.randn(2048, 129, generator=generator)
    delta2 = torch.randn(2048, 129, generator=generator)
    x = table[tokens] + delta + delta2
    rstd = torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6)
    return dy, tokens, table, delta, weight, rstd, dy2, delta2


def _other_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(2)
    return tuple(torch.randn(2048, 129, generator=generator) for _ in range(3))


Case = tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]
CASES: dict[str, Case] = {
    # 2048 rows of 129: 32 chunks of 64 rows, re-split into 256 programs of 8 rows
    "rms_norm_129": (rms_norm_backward, lambda: _rms_inputs(2048, 129)),
    # 2100 rows of 131: 30 chunks of 70 rows, 210 programs of 10 rows in steps of 2
    "layer_norm_131": (layer_norm_backward, _layer_norm_inputs),
    "rms_norm_bf16_260": (bf16_rms_norm_backward, lambda: _rms_inputs(1536, 260, bf16=True)),
    "embedding_rms_norm_129": (embedding_rms_norm_backward, _embedding_inputs),
}


def _eager_rms(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> list[torch.Tensor]:
    """Eager autograd's gradients of RMSNorm (what the explicit backward must equal)."""
    x = x.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    y = x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6) * w
    return list(torch.autograd.grad(y, (x, w), dy.float()))


def _eager_layer_norm(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor
) -> list[torch.Tensor]:
    x = x.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    b = torch.zeros_like(weight, requires_grad=True)
    y = torch.nn.functional.layer_norm(x, (x.shape[1],), w, b, 1e-5)
    return list(torch.autograd.grad(y, (x, w, b), dy))


def _eager_embedding_rms(
    dy: torch.Tensor, tokens: torch.Tensor, table: torch.Tensor, delta: torch.Tensor,
    weight: torch.Tensor, rstd: torch.Tensor, dy2: torch.Tensor, delta2: torch.Tensor,
) -> list[torch.Tensor]:  # fmt: skip
    table = table.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    x = table[tokens] + delta + delta2
    y = x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6) * w
    return list(torch.autograd.grad(y, (table, w), dy + dy2))


def _expected(name: str, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    if name.startswith("embedding"):
        return _eager_embedding_rms(*inputs)
    dy, x, weight = inputs[:3]
    return _eager_layer_norm(dy, x, weight) if "layer" in name else _eager_rms(dy, x, weight)


def _scheduled(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> list[Any]:
    from ember.inductor.codegen.triton import TritonBackend

    graph = decompose(prims.trace(fn, *inputs), DECOMPOSITIONS)
    program = lower_graph(graph, TritonBackend().dtypes, split_reductions=True)
    return combine_mixed_order_reductions(program, schedule(program, "triton"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_norm_backwards_take_one_mixed_order_kernel(name: str) -> None:
    fn, make_inputs = CASES[name]
    scheduled = _scheduled(fn, make_inputs())
    mixed = [item for item in scheduled if isinstance(item, MixedOrderKernel)]
    assert len(mixed) == 1
    assert mixed[0].programs >= 128 and mixed[0].rows_per_program >= 8


def test_a_column_sum_of_a_map_the_rows_do_not_read_keeps_its_kernel() -> None:
    scheduled = _scheduled(column_sum_of_other_map, _other_inputs())
    assert not any(isinstance(item, MixedOrderKernel) for item in scheduled)


@pytest.mark.parametrize("name", sorted(CASES))
def test_mixed_order_gradients_equal_eager(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ember.inductor.codegen.triton import TritonBackend

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    graph = prims.trace(fn, *inputs)
    compiled = compile_graph(graph, inputs, backend=TritonBackend(), cache=ArtifactCache(tmp_path))
    got = list(compiled(*inputs))
    expected = _expected(name, inputs)
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    # and off: the two kernels give the same values (atomic adds in another order: float
    # rounding apart)
    off = dataclasses.replace(InductorConfig(), mixed_order_reductions=False)
    separate = compile_graph(
        graph, inputs, backend=TritonBackend(), config=off, cache=ArtifactCache(tmp_path / "off")
    )
    for ours, theirs in zip(got, separate(*inputs)):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_fallback_values_equal_eager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.inductor.codegen.triton import TritonBackend

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    inputs = _other_inputs()
    graph = prims.trace(column_sum_of_other_map, *inputs)
    compiled = compile_graph(graph, inputs, backend=TritonBackend(), cache=ArtifactCache(tmp_path))
    for ours, theirs in zip(compiled(*inputs), column_sum_of_other_map(*inputs)):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_mixed_order_kernels_build_for_sm90(build_for_sm90: Any) -> None:
    report = build_for_sm90(__file__, sorted(CASES))
    for name in CASES:
        assert all(kernel["ptx"] for kernel in report[name]), name
        assert any(".target sm_90" in text for k in report[name] for text in k["ptx"]), name
