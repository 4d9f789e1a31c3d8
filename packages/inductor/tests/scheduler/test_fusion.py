"""Fusion order: a kernel moves down to join a later one that reads the same inputs, taking
the matmuls that read its results along after it (Llama's MLP backward: the recomputed SiLU
product for the down projection's weight gradient and the SiLU backward are one kernel)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.ir.program import ExternNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.inductor.scheduler.fusion import Kernel, schedule
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache


def mlp_backward(
    gate: torch.Tensor, up: torch.Tensor, grad: torch.Tensor, down: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward of `down(silu(gate) * up)` as ember-autodiff orders it: the SiLU product
    computed again for the weight gradient, then the input gradient, then the SiLU backward."""
    product = F.silu(gate) * up
    grad_down = grad.t() @ product
    grad_product = grad @ down
    grad_up = grad_product * F.silu(gate)
    grad_gate = torch.ops.aten.silu_backward(grad_product * up, gate)
    return grad_down, grad_up, grad_gate


def _inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return tuple(
        torch.randn(*shape, generator=generator) for shape in ((16, 24), (16, 24), (16, 8), (8, 24))
    )


def test_recomputed_product_joins_the_silu_backward(tmp_path: Path) -> None:
    inputs = _inputs()
    program = lower_graph(decompose(prims.trace(mlp_backward, *inputs), DECOMPOSITIONS))
    scheduled = schedule(program, "triton")
    kernels = [item for item in scheduled if isinstance(item, Kernel)]
    assert len(kernels) == 1  # the product, grad_up and grad_gate: gate and up read once
    matmuls = [item for item in scheduled if isinstance(item, ExternNode)]
    kernel_at = scheduled.index(kernels[0])
    weight_gradient = next(m for m in matmuls if kernels[0].members[0].node.storage in m.reads())
    assert scheduled.index(weight_gradient) > kernel_at  # moved after the kernel it reads
    compiled = compile_graph(
        prims.trace(mlp_backward, *inputs), inputs, cache=ArtifactCache(tmp_path)
    )
    for actual, expected in zip(compiled(*inputs), mlp_backward(*inputs), strict=True):
        torch.testing.assert_close(actual, expected)


def test_a_kernel_never_moves_past_a_writer_of_its_inputs(tmp_path: Path) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        first = x.sin() * 2  # read by the matmul below, then x is written
        product = first @ w
        x.mul_(3)  # the kernel above must still read x before this write
        return product, x.sin() * 2 + first

    x, w = torch.randn(6, 6), torch.randn(6, 6)
    compiled = compile_graph(
        prims.trace(fn, x.clone(), w), (x.clone(), w), cache=ArtifactCache(tmp_path)
    )
    actual_x, expected_x = x.clone(), x.clone()
    for actual, expected in zip(compiled(actual_x, w), fn(expected_x, w), strict=True):
        torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(actual_x, expected_x)
