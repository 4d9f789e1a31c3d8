"""Convolution as an implicit GEMM under Triton's interpreter: 2-D convolutions with fused
epilogues (bias and ReLU, residual add, batch norm in inference, GELU) over strides, padding,
dilation, odd channel counts and channels-last tensors, and ResNet's stem and bottleneck
(several convolutions in one graph, bfloat16), against eager; the epilogue fuses
(one kernel, no cuDNN call); a convolution with nothing to fuse stays cuDNN's; the vendor
path (cuDNN, then the epilogue kernel) computes the same values."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
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


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("conv-cache")))


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _config(**changes: Any) -> InductorConfig:
    settings: dict[str, Any] = {"gemm_templates": True, "cache": False, **changes}
    return dataclasses.replace(load(InductorConfig), **settings)


def _randn(*size: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*size, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last)


def _batch_norm(x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor,
                var: torch.Tensor) -> torch.Tensor:  # fmt: skip
    y = F.conv2d(x, w, padding=1)
    return torch.relu(F.batch_norm(y, mean, var, training=False))


def _norm(channels: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Inference batch norm's mean, variance, weight and bias (float32, as autocast keeps them)."""
    mean, weight, bias = (_randn(channels, seed=seed + i) for i in (0, 2, 3))
    return mean, _randn(channels, seed=seed + 1).abs() + 0.5, weight, bias


def _conv_norm(x: torch.Tensor, w: torch.Tensor, norm: tuple[torch.Tensor, ...],
               relu: bool = True, **conv: Any) -> torch.Tensor:  # fmt: skip
    mean, var, weight, bias = norm
    y = F.batch_norm(F.conv2d(x, w, **conv), mean, var, weight, bias, training=False)
    return torch.relu(y) if relu else y


def _stem(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
          *norms: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """ResNet's 7x7 stride-2 convolution over 3 channels, then a 1x1 one, each with batch norm
    and ReLU: two templates back to back."""
    y = _conv_norm(x, w1, norms[:4], stride=2, padding=3)
    return _conv_norm(y, w2, norms[4:])


def _bottleneck(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor,
                shortcut: torch.Tensor, *norms: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """ResNet-50's downsampling bottleneck: 1x1, 3x3 stride 2 and 1x1 convolutions with batch
    norm (ReLU after the first two), a strided 1x1 shortcut with batch norm, the residual add
    and ReLU."""
    y = _conv_norm(x, w1, norms[0:4])
    y = _conv_norm(y, w2, norms[4:8], stride=2, padding=1)
    y = _conv_norm(y, w3, norms[8:12], relu=False)
    return torch.relu(y + _conv_norm(x, shortcut, norms[12:16], relu=False, stride=2))


CASES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "bias_relu_3x3": (
        lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=1)),
        lambda: (_randn(2, 5, 9, 8), _randn(7, 5, 3, 3, seed=1), _randn(7, seed=2)),
    ),
    "strided_dilated_residual": (
        lambda x, w, r: F.conv2d(x, w, stride=2, padding=2, dilation=2) + r,
        lambda: (_randn(2, 3, 11, 10), _randn(6, 3, 3, 3, seed=1), _randn(2, 6, 6, 5, seed=2)),
    ),
    "pointwise_1x1_gelu": (
        lambda x, w: F.gelu(F.conv2d(x, w)),
        lambda: (_randn(3, 20, 6, 6), _randn(17, 20, 1, 1, seed=1)),
    ),
    "channels_last_bias_silu": (
        lambda x, w, b: F.silu(F.conv2d(x, w, b, padding=(1, 0))),
        lambda: (
            _channels_last(_randn(2, 6, 7, 9)),
            _channels_last(_randn(10, 6, 3, 2, seed=1)),
            _randn(10, seed=2),
        ),
    ),
    "batch_norm_inference": (
        _batch_norm,
        lambda: (
            _randn(2, 4, 6, 6),
            _randn(8, 4, 3, 3, seed=1),
            _randn(8, seed=2),
            _randn(8, seed=3).abs() + 0.5,
        ),
    ),
    # several convolutions of one graph, each its own template (they were once given one
    # kernel name, so one template ran twice and the other never)
    "resnet_bottleneck_channels_last": (
        _bottleneck,
        lambda: (
            _channels_last(_randn(2, 8, 9, 11)),
            *(
                _channels_last(_randn(*size, seed=seed))
                for seed, size in enumerate(
                    [(4, 8, 1, 1), (4, 4, 3, 3), (12, 4, 1, 1), (12, 8, 1, 1)], start=1
                )
            ),
            *_norm(4, 10),
            *_norm(4, 20),
            *_norm(12, 30),
            *_norm(12, 40),
        ),
    ),
    "bfloat16_resnet_stem": (
        _stem,
        lambda: (
            _randn(2, 3, 21, 19, dtype=torch.bfloat16),
            # weights at He initialization's scale: activations near 1, as in a trained model
            _channels_last((_randn(8, 3, 7, 7, seed=1) * 0.1).to(torch.bfloat16)),
            (_randn(16, 8, 1, 1, seed=2) * 0.5).to(torch.bfloat16),
            *_norm(8, 10),
            *_norm(16, 20),
        ),
    ),
}

# bfloat16 as the interpreter computes it: its float32-to-bfloat16 casts truncate (eager's
# round to nearest), and the template rounds the product before the epilogue as eager does
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 5e-2)}  # rtol, atol


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv_templates_match_eager(name: str, cache: ArtifactCache, interpreter: None) -> None:
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    graph = prims.trace(fn, *inputs)
    compiled = compile_graph(graph, inputs, config=_config(), backend=TritonBackend(), cache=cache)
    kernels = compiled.call.__globals__["kernels"].values()
    assert any(isinstance(k, GemmChoice) for k in kernels)
    expected = fn(*inputs)
    rtol, atol = TOLERANCES[expected.dtype]
    torch.testing.assert_close(compiled(*inputs), expected, rtol=rtol, atol=atol)


def test_conv_epilogue_fuses_and_a_bare_conv_stays_cudnn() -> None:
    fn, make_inputs = CASES["bias_relu_3x3"]
    inputs = make_inputs()
    fused = generate(prims.trace(fn, *inputs), TritonBackend(), _config(), torch.device("cuda"))
    assert fused["kernels"] == 1 and fused["targets"] == []

    def bare(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, padding=1)

    alone = generate(prims.trace(bare, *inputs[:2]), TritonBackend(), _config(),
                     torch.device("cuda"))  # fmt: skip
    assert alone["targets"] == ["aten::convolution.default"]


@pytest.mark.parametrize("name", ["strided_dilated_residual", "channels_last_bias_silu"])
def test_conv_vendor_path_computes_the_same_values(
    name: str, cache: ArtifactCache, interpreter: None
) -> None:
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    graph = prims.trace(fn, *inputs)
    compiled = compile_graph(graph, inputs, config=_config(), backend=TritonBackend(), cache=cache)
    (choice,) = [
        k for k in compiled.call.__globals__["kernels"].values() if isinstance(k, GemmChoice)
    ]
    choice.launch = choice.vendor  # as if cuDNN had measured faster
    torch.testing.assert_close(compiled(*inputs), fn(*inputs), rtol=1e-4, atol=1e-4)


def test_conv_templates_compile_to_ptx_without_a_gpu(build_for_sm90: Any) -> None:
    """A bfloat16 implicit-GEMM convolution builds for an H100 (sm_90) here, with tensor-core
    instructions in it."""
    names = ["bias_relu_3x3", "channels_last_bias_silu"]
    report = build_for_sm90(__file__, names, config="_config", dtype="bfloat16")
    for name in names:
        built = [ptx for kernel in report[name] if kernel["template"] for ptx in kernel["ptx"]]
        assert built, name
        assert all(".target sm_90" in ptx and "mma" in ptx for ptx in built), name


def _conv_then_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                      lw: torch.Tensor, lb: torch.Tensor) -> torch.Tensor:  # fmt: skip
    features = torch.relu(F.conv2d(x, w, b, padding=1))
    return torch.relu(F.linear(features.flatten(1), lw, lb))


def _conv_then_linear_inputs() -> tuple[torch.Tensor, ...]:
    return (
        _randn(2, 5, 6, 6),
        _randn(7, 5, 3, 3, seed=1),
        _randn(7, seed=2),
        _randn(9, 7 * 6 * 6, seed=3),
        _randn(9, seed=4),
    )


def test_conv_templates_alone_template_the_convolutions_and_keep_cublas() -> None:
    """`conv_templates` (the default mode's setting) makes the convolution with its epilogue a
    template and leaves the matmul to the vendor; off (the default), both stay extern."""
    inputs = _conv_then_linear_inputs()
    graph = prims.trace(_conv_then_linear, *inputs)
    cuda = torch.device("cuda")
    convs = generate(graph, TritonBackend(), _config(gemm_templates=False, conv_templates=True),
                     cuda)  # fmt: skip
    assert convs["targets"] == ["aten::addmm.default"]
    neither = generate(graph, TritonBackend(), _config(gemm_templates=False), cuda)
    assert neither["targets"] == ["aten::addmm.default", "aten::convolution.default"]


def test_conv_templates_alone_match_eager(cache: ArtifactCache, interpreter: None) -> None:
    inputs = _conv_then_linear_inputs()
    graph = prims.trace(_conv_then_linear, *inputs)
    config = _config(gemm_templates=False, conv_templates=True)
    compiled = compile_graph(graph, inputs, config=config, backend=TritonBackend(), cache=cache)
    choices = [
        k for k in compiled.call.__globals__["kernels"].values() if isinstance(k, GemmChoice)
    ]
    assert len(choices) == 1 and choices[0].vendor.conv is not None
    torch.testing.assert_close(compiled(*inputs), _conv_then_linear(*inputs), rtol=1e-4, atol=1e-4)
