"""Recomputed loads (scheduler/recompute_loads.py): a batch-norm-ReLU backward whose ReLU output
is stored for a convolution computes the ReLU mask from the convolution output it loads
anyway, so its reduction and its input-gradient map each read one map fewer. Values against
eager under Triton's interpreter; a conv-BN-ReLU block's training step end to end (its
backward reads the forward's channels-last maps; at this size the partition saves the ReLU
output, so this one guards the path the pass sits on, not the pass)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.autodiff import aot
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.ir.indexing import index_var
from ember.inductor.ir.program import ExternNode, Program
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph, saved_layouts
from ember.inductor.scheduler.fusion import Kernel, ScheduledNode, schedule
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("recompute-loads-cache")))


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def bn_relu_backward(
    x: torch.Tensor,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor,
    weight: torch.Tensor,
    grad: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """A batch-norm-ReLU backward as ember-autodiff's partition leaves it: the ReLU output
    computed again from the saved convolution output `x` and statistics, read by the next
    convolution (an extern call) and, for its mask, by the batch-norm backward's two sums
    and its input gradient."""
    channel = (1, -1, 1, 1)
    centered = x.float() - mean.view(channel)
    relu = torch.relu(centered * (invstd * gamma).view(channel) + beta.view(channel)).to(x.dtype)
    convolved = F.conv2d(relu, weight, padding=1)
    masked = torch.where(relu <= 0, torch.zeros_like(grad), grad).float()
    count = x.numel() // x.shape[1]
    grad_sum = masked.sum((0, 2, 3))
    dot = (masked * centered).sum((0, 2, 3))
    grad_input = (
        masked - grad_sum.view(channel) / count - centered * (invstd**2 * dot / count).view(channel)
    ) * (invstd * gamma).view(channel)
    return convolved, grad_sum, dot, grad_input.to(x.dtype)


def _inputs(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, 6, 6, generator=generator) * 2 + 0.5
    mean = x.mean((0, 2, 3))
    invstd = (x.var((0, 2, 3), unbiased=False) + 1e-5).rsqrt()
    gamma = torch.rand(8, generator=generator) + 0.5
    beta = torch.randn(8, generator=generator) / 2
    weight = torch.randn(8, 8, 3, 3, generator=generator) / 8
    grad = torch.randn(4, 8, 6, 6, generator=generator)
    return x.to(dtype), mean, invstd, gamma, beta, weight.to(dtype), grad.to(dtype)


# built for sm_90 by `build_for_sm90` (conftest.py)
CASES = {"bn_relu_backward": (bn_relu_backward, _inputs)}


def _scheduled(fn: Any, inputs: tuple[torch.Tensor, ...]) -> tuple[Program, list[ScheduledNode]]:
    program = lower_graph(decompose(prims.trace(fn, *inputs), DECOMPOSITIONS))
    return program, schedule(program, "triton")


def _maps_loaded(kernel: Kernel) -> set[str]:
    """Storages the kernel loads along every one of its loops (whole maps, not vectors)."""
    loops = {index_var("x", k) for k in range(len(kernel.outer))}
    loops |= {index_var("r", k) for k in range(len(kernel.inner))}
    return {
        str(load.args[0])
        for member in kernel.members
        for load in member.loads()
        if isinstance(load.args[1], sympy.Expr) and loops <= load.args[1].free_symbols
    }


def test_the_mask_is_computed_from_the_convolution_output() -> None:
    program, scheduled = _scheduled(bn_relu_backward, _inputs())
    convolution = next(item for item in scheduled if isinstance(item, ExternNode))
    kernels = [item for item in scheduled if isinstance(item, Kernel)]
    stored = {member.node.storage for kernel in kernels for member in kernel.members}
    (relu,) = convolution.reads() & stored  # the ReLU output, stored for the convolution
    readers = [k for k in kernels if relu in _maps_loaded(k)]
    assert readers == []  # before: the sums' kernel and the input gradient's loaded it
    x, grad = program.input_storages[0], program.input_storages[6]
    for kernel in kernels:
        if any(m.node.storage == relu for m in kernel.members):
            continue
        # the sums and the input gradient read the convolution output and the gradient
        assert _maps_loaded(kernel) == {x, grad}, (kernel.name, _maps_loaded(kernel))
    # what a node says it reads (memory planning, templates) matches its kernel's loads
    for kernel in kernels:
        for member in kernel.members:
            assert {str(load.args[0]) for load in member.loads()} == member.node.reads()


def test_a_value_no_one_else_reads_is_not_computed_again() -> None:
    """Without the convolution, the ReLU output is not stored for anyone: the pass leaves
    what the lowering chose (each kernel reads what it read)."""

    def without_convolution(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        _, grad_sum, dot, grad_input = bn_relu_backward(*inputs)
        return grad_sum, dot, grad_input

    _, scheduled = _scheduled(without_convolution, _inputs())
    for kernel in (item for item in scheduled if isinstance(item, Kernel)):
        for member in kernel.members:
            assert {str(load.args[0]) for load in member.loads()} == member.node.reads()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_recomputed_mask_values_match_eager(
    dtype: torch.dtype, cache: ArtifactCache, interpreter: None
) -> None:
    inputs = _inputs(dtype)
    compiled = compile_graph(
        prims.trace(bn_relu_backward, *inputs), inputs, backend=TritonBackend(), cache=cache
    )
    expected = bn_relu_backward(*inputs)
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    for actual, want in zip(compiled(*inputs), expected, strict=True):
        torch.testing.assert_close(actual, want, **tolerance)
    # the mask itself is exact: zero gradients exactly where eager's ReLU output is zero
    relu_zero = expected[3] == 0
    assert torch.equal(compiled(*inputs)[3] == 0, relu_zero)


def test_recomputed_mask_values_match_eager_in_cpp(cache: ArtifactCache) -> None:
    """The scheduler serves the C++ back end too: the same rewrite, compiled C++."""
    inputs = _inputs()
    compiled = compile_graph(prims.trace(bn_relu_backward, *inputs), inputs, cache=cache)
    expected = bn_relu_backward(*inputs)
    for actual, want in zip(compiled(*inputs), expected, strict=True):
        torch.testing.assert_close(actual, want)
    assert torch.equal(compiled(*inputs)[3] == 0, expected[3] == 0)


def test_recomputed_mask_kernels_compile_for_sm90(build_for_sm90: Any) -> None:
    report = build_for_sm90(__file__, ["bn_relu_backward"], dtype="bfloat16")
    kernels = report["bn_relu_backward"]
    assert kernels and all(ptx for kernel in kernels for ptx in kernel["ptx"])


class ConvBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(1)
        self.first = torch.nn.Parameter(torch.randn(8, 3, 3, 3, generator=generator) / 4)
        self.second = torch.nn.Parameter(torch.randn(8, 8, 3, 3, generator=generator) / 8)
        self.norm = torch.nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.norm(F.conv2d(x, self.first, padding=1)))
        return F.conv2d(hidden, self.second, padding=1).square().mean()


def test_conv_bn_relu_training_step_matches_eager(cache: ArtifactCache, interpreter: None) -> None:
    eager = ConvBlock()
    compiled_block = ConvBlock()
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(2))

    saved: dict[int, tuple[int, ...]] = {}

    def compiler(graph: prims.Graph, example_inputs: Any) -> Any:
        # the backward reads the forward's saved maps in the layout it chose (channels-last)
        strides = dict(saved) if "saved_inputs" in graph.meta else None
        compiled = compile_graph(
            graph, example_inputs, backend=TritonBackend(), cache=cache, input_strides=strides
        )
        saved.update(saved_layouts(compiled))
        return compiled

    graph = prims.trace(compiled_block, x)
    step = aot(graph, [x], compiler, compiler)
    loss = step(x)
    expected = eager(x)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    loss.backward()
    expected.backward()
    for (name, got), want in zip(compiled_block.named_parameters(), eager.parameters()):
        assert got.grad is not None and want.grad is not None, name
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5, msg=name)
