"""Max pooling through the C++ kernels: values, indices and gradients bit-identical to eager's
(NaN, ties, signed zeros, -inf, padding, ceil mode, strides, dilation, both layouts), and the
window search and the gradient gather vectorized loops (GCC's own report).

ember-prims searches each window with a chain of selects over its elements (each output a
SIMD lane) and gathers the input gradient from the windows that may hold each element; the
window argmax as a reduction, and the scatter through the indices, were scalar loops
(small_cnn's training step, `docs/perf/cpu-kernels.md`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph
from ember.prims.config import load

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from cpp_build import needs_compiler, vectorized_loops  # noqa: E402

aten = torch.ops.aten

# kernel, stride, padding, dilation, ceil mode
CASES = [
    ([2, 2], [2, 2], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], True),
    ([3, 2], [1, 2], [1, 0], [2, 1], True),
    ([2, 3], [3, 1], [1, 1], [1, 2], False),
    ([5, 5], [1, 1], [2, 2], [1, 1], False),
    ([2, 2], [1, 1], [0, 0], [1, 1], True),
    # 36 elements: the amax/argmax reduction and the scatter, whose argmax takes the first
    # of several NaNs (eager the last) or a padding element where all are -inf (eager the
    # first inside), and whose amax the last of equal zeros: the map has none of those
    ([6, 6], [2, 2], [3, 3], [1, 1], True),
]


def _map(channels_last: bool, awkward: bool) -> torch.Tensor:
    """Integers (ties in most windows) and a NaN; awkward: two NaNs side by side, a plane of
    -inf (windows whose first element is padding), signed zeros."""
    x = torch.randn(2, 3, 9, 11, generator=torch.Generator().manual_seed(0)).round() + 0.0
    x[1, 1, 4, 4] = math.nan
    if awkward:
        x[0, 0, 1, 1] = x[0, 0, 1, 2] = math.nan
        x[1, 2] = -math.inf
        x[0, 1, 0, :5] = -0.0
        x[0, 1, 0, 5:] = 0.0
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def _same(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Equal bit for bit: NaN where eager has NaN, zeros of the same sign."""
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    if ours.is_floating_point():
        assert torch.equal(ours.isnan(), theirs.isnan())
        numbers = ~theirs.isnan()
        assert torch.equal(ours.signbit()[numbers], theirs.signbit()[numbers])
        ours, theirs = ours.nan_to_num(0.0), theirs.nan_to_num(0.0)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c[:4])) + str(c[4]))
def test_max_pooling_and_its_gradient_equal_eager(
    case: tuple[Any, ...], channels_last: bool
) -> None:
    k, s, p, d, ceil_mode = case
    x = _map(channels_last, awkward=k[0] * k[1] <= 25)

    def pool(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return aten.max_pool2d_with_indices(x, k, s, p, d, ceil_mode)

    def pool_backward(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return aten.max_pool2d_with_indices_backward(grad, x, k, s, p, d, ceil_mode, indices)

    values, indices = pool(x)
    ours = compile_graph(prims.trace(pool, x), (x,))(x)
    _same(ours[0], values)
    _same(ours[1], indices)
    # gradients in tenths: sums of several windows' gradients are exact whatever the order,
    # so the check is on which windows each element gathers
    grad = torch.randn(values.shape, generator=torch.Generator().manual_seed(1)).round(decimals=1)
    expected = pool_backward(grad, x, indices)
    _same(compile_graph(prims.trace(pool_backward, grad, x, indices), (grad, x, indices))(
        grad, x, indices), expected)  # fmt: skip


def test_overlapping_windows_add_gradients_in_eager_order() -> None:
    """An element chosen by several windows gets their gradients added in the windows' order
    (rows, then columns), as eager's scatter adds them: the float sums are the same bits."""
    x = torch.zeros(1, 1, 7, 7)
    x[0, 0, 3, 3] = 1.0  # the maximum of all nine 3x3 windows of stride 1 around it

    def pool_backward(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return aten.max_pool2d_with_indices_backward(
            grad, x, [3, 3], [1, 1], [0, 0], [1, 1], False, indices
        )

    _, indices = aten.max_pool2d_with_indices(x, [3, 3], [1, 1])
    grad = torch.randn(1, 1, 5, 5, generator=torch.Generator().manual_seed(2)) * 1e3
    expected = pool_backward(grad, x, indices)
    ours = compile_graph(prims.trace(pool_backward, grad, x, indices), (grad, x, indices))
    _same(ours(grad, x, indices), expected)


def _normalized_pool(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """small_cnn's stage in its training forward: a convolution, normalized, a ReLU, a 2x2 max
    pool (the backward finds the windows' offsets again)."""
    y = torch.relu(F.conv2d(x, weight, padding=1) * scale + 1)
    return aten.max_pool2d_with_indices(y, [2, 2], [2, 2])[0]


def _normalized_pool_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """small_cnn's backward through its pool: the window offsets found again from the
    normalized map, the gradient gathered through them and masked by the ReLU."""
    y = torch.relu(F.conv2d(x, weight, padding=1) * scale + 1)
    _, indices = aten.max_pool2d_with_indices(y, [2, 2], [2, 2])
    gathered = aten.max_pool2d_with_indices_backward(
        grad, y, [2, 2], [2, 2], [0, 0], [1, 1], False, indices
    )
    masked = aten.threshold_backward(gathered, y, 0)
    return masked.contiguous(memory_format=torch.channels_last)  # what the convolution reads


@needs_compiler
def test_the_window_search_and_the_gradient_gather_are_vectorized_loops(tmp_path: Path) -> None:
    """Every kernel of a channels-last normalized pool and of its backward is a loop GCC
    vectorizes. The window argmax as one select on `greater | NaN` was scalar ("no vectype")
    where the elements are ReLU selects; the scatter-add of the gradient was scalar. (In
    NCHW the gather's SIMD loop runs along a row, loading each window's offset at w // 2:
    GCC leaves it scalar.)"""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 12, 12, generator=generator)
    x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(16, 8, 3, 3, generator=generator) / 8
    scale = torch.rand(1, 16, 1, 1, generator=generator) + 0.5
    grad = torch.randn(2, 16, 6, 6, generator=generator)
    grad = grad.contiguous(memory_format=torch.channels_last)
    cases: list[tuple[Callable[..., Any], tuple[torch.Tensor, ...]]] = [
        (_normalized_pool, (x, weight, scale)),
        (_normalized_pool_backward, (grad, x, weight, scale)),
    ]
    # channels-last as the pipeline lays out a convolutional model out (`channels_last`)
    config = dataclasses.replace(load(InductorConfig), layout_optimization="channels_last")
    for fn, inputs in cases:
        compiled = compile_graph(prims.trace(fn, *inputs), inputs, config=config)
        torch.testing.assert_close(compiled(*inputs), fn(*inputs))  # x * scale + 1: an FMA
        module = compiled.module
        assert vectorized_loops(module, tmp_path) >= module.count('extern "C"')
