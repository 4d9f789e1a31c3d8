"""1x1 convolutions as matrix multiplies (`lowering/pointwise_convolutions.py`): which
convolutions become `mm`/`addmm` calls, and values and gradients equal eager's (bfloat16 on
the CPU, channels-last forced)."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ember
from ember import prims
from ember.inductor.backend import inductor
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph, generate
from ember.prims.config import load
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache

FORCED = {"layout_optimization": "channels_last", "cache": False}


class Bottleneck(nn.Module):
    """A ResNet bottleneck's convolutions at odd sizes: a 3x3 stem, a 1x1 reduction without
    bias, a 1x1 expansion with one, a residual add, then a strided 1x1 shortcut (which stays
    a convolution: its pixels are not rows of one matrix)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 10, 3, padding=1, bias=False)
        self.reduce = nn.Conv2d(10, 6, 1, bias=False)
        self.expand = nn.Conv2d(6, 10, 1)
        self.down = nn.Conv2d(10, 12, 1, stride=2, bias=False)
        self.fc = nn.Linear(12, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        z = self.expand(torch.relu(self.reduce(y))) + y
        return self.fc(self.down(torch.relu(z)).mean((2, 3)))


def _twins(dtype: torch.dtype = torch.bfloat16) -> tuple[Bottleneck, Bottleneck]:
    torch.manual_seed(0)
    model, twin = Bottleneck().to(dtype), Bottleneck().to(dtype)
    twin.load_state_dict(model.state_dict())
    return model, twin


def _calls(wrapper: str) -> list[str]:
    return re.findall(r"ops\['aten::(\w+)\.default'\]", wrapper)


def _generated(model: nn.Module, x: torch.Tensor, **options: object) -> str:
    graph = decompose(prims.trace(model, x), DECOMPOSITIONS)
    config = dataclasses.replace(load(InductorConfig), cache=False, **options)
    return str(generate(graph, CppBackend(), config)["wrapper"])


def test_unit_convolutions_become_matmuls_and_others_stay() -> None:
    model, _ = _twins()
    x = torch.randn(2, 3, 7, 5, dtype=torch.bfloat16)
    calls = _calls(_generated(model.eval(), x, layout_optimization="channels_last"))
    # the reduction (mm), the expansion with its bias (addmm) and the classifier (addmm);
    # the 3x3 stem and the strided shortcut stay convolutions
    assert sorted(calls) == ["addmm", "addmm", "convolution", "convolution", "mm"]
    off = _generated(
        model, x, layout_optimization="channels_last", pointwise_convolutions_as_matmuls=False
    )
    assert sorted(_calls(off)) == ["addmm", "convolution"] + ["convolution"] * 3
    nchw = _generated(model, x, layout_optimization="off")  # pixels are not rows
    assert _calls(nchw).count("convolution") == 4


def test_float32_convolutions_stay_cudnn_calls() -> None:
    # eager's float32 convolutions run in TF32 on the GPU, its matmuls do not
    model, _ = _twins(torch.float32)
    x = torch.randn(2, 3, 7, 5)
    assert (
        _calls(_generated(model, x, layout_optimization="channels_last")).count("convolution") == 4
    )


def test_inference_equals_eager() -> None:
    model, twin = _twins()
    compiled = ember.compile(twin.eval(), backend=functools.partial(inductor, options=FORCED))
    with torch.no_grad():
        for shape in ((2, 3, 7, 5), (2, 3, 7, 5), (1, 3, 4, 9)):
            x = torch.randn(shape, dtype=torch.bfloat16)
            ours, theirs = compiled(x), model.eval()(x)
            torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("input_grad", [True, False])
def test_gradients_equal_eager(input_grad: bool) -> None:
    model, twin = _twins()
    compiled = ember.compile(twin, backend=functools.partial(inductor, options=FORCED))
    x = torch.randn(3, 3, 7, 5, dtype=torch.bfloat16, requires_grad=input_grad)
    x_twin = x.detach().clone().requires_grad_(input_grad)
    ours, theirs = compiled(x_twin), model(x)
    torch.testing.assert_close(ours, theirs)
    ours.float().square().sum().backward()
    theirs.float().square().sum().backward()
    if input_grad:
        assert x.grad is not None and x_twin.grad is not None
        torch.testing.assert_close(x_twin.grad, x.grad)
    for (name, a), b in zip(twin.named_parameters(), model.parameters()):
        assert a.grad is not None and b.grad is not None, name
        assert a.grad.stride() == b.grad.stride(), name
        torch.testing.assert_close(a.grad, b.grad, msg=name)


class Unit(nn.Module):
    """Two unit convolutions (the first reads the image) and a 3x3 one after them."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(6, 10, 1, bias=False)
        self.b = nn.Conv2d(10, 4, 1)
        self.c = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


@pytest.mark.parametrize(
    ("dtype", "shape"),
    [(torch.float16, (3, 6, 1, 1)), (torch.bfloat16, (1, 6, 5, 3)), (torch.float16, (2, 6, 4, 4))],
)
def test_one_pixel_maps_a_single_image_and_float16(
    dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    """Maps of one pixel (rows are images), one image (size-1 batch: any batch stride) and
    float16; the input given channels-last, and a view at a storage offset. Gradients are
    as accurate as eager's against a float64 run (they differ from eager's by an ulp)."""
    torch.manual_seed(0)
    model, twin, exact = Unit().to(dtype), Unit().to(dtype), Unit().double()
    twin.load_state_dict(model.state_dict())
    exact.load_state_dict(model.state_dict())
    compiled = ember.compile(twin, backend=functools.partial(inductor, options=FORCED))
    x = torch.randn(*shape, dtype=dtype).contiguous(memory_format=torch.channels_last)
    x_eager, x_ours = (x.detach().clone().requires_grad_() for _ in range(2))
    x_exact = x.detach().double().requires_grad_()
    ours, theirs = compiled(x_ours), model(x_eager)
    torch.testing.assert_close(ours, theirs)
    for out in (ours, theirs, exact(x_exact)):
        out.double().sum().backward()

    def within(value: Any, eager: Any, exact_value: Any) -> bool:
        assert value is not None and eager is not None and exact_value is not None
        ours, theirs = ((v.double() - exact_value).abs().max().item() for v in (value, eager))
        return ours <= 2 * theirs + 1e-3 * exact_value.abs().max().item()

    assert within(x_ours.grad, x_eager.grad, x_exact.grad)
    for (name, a), b, c in zip(twin.named_parameters(), model.parameters(), exact.parameters()):
        assert within(a.grad, b.grad, c.grad), name
    offset = torch.randn(2, *shape[1:], dtype=dtype)[1:]  # storage offset of one image
    with torch.no_grad():
        torch.testing.assert_close(compiled(offset), model(offset))


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="runs the templates on CPU tensors through Triton's interpreter",
)
def test_products_become_gemm_templates_with_their_epilogues(tmp_path: Path) -> None:
    """Under `gemm_templates` (max-autotune) a unit convolution's product is a GEMM like any
    other: the Triton template with the ReLU after it fused in (Triton's interpreter)."""
    pytest.importorskip("triton")

    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        y = torch.relu(torch.nn.functional.conv2d(x, w1))
        return torch.relu(torch.nn.functional.conv2d(y, w2)) + 1.0

    torch.manual_seed(0)
    x = torch.randn(2, 16, 5, 7, dtype=torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    w1 = (torch.randn(24, 16, 1, 1) / 4).to(torch.bfloat16)  # unit-variance maps
    w2 = (torch.randn(8, 24, 1, 1) / 5).to(torch.bfloat16)
    config = dataclasses.replace(
        load(InductorConfig), cache=False, gemm_templates=True, layout_optimization="channels_last"
    )
    graph = prims.trace(fn, x, w1, w2)
    wrapper = generate(graph, TritonBackend(), config, torch.device("cuda"))["wrapper"]
    assert not _calls(wrapper) and wrapper.count("kernels['triton_gemm_mm_") == 2
    compiled = compile_graph(
        graph, (x, w1, w2), config=config, backend=TritonBackend(), cache=ArtifactCache(tmp_path)
    )
    torch.testing.assert_close(compiled(x, w1, w2), fn(x, w1, w2), rtol=2e-2, atol=2e-2)


def test_backward_runs_unit_convolution_gradients_as_matmuls(output_code: Any) -> None:
    """The reduction's input and weight gradients are two `mm`s; the expansion (its bias
    gradient asked for), the 3x3 stem and the strided shortcut stay `convolution_backward`."""
    _, twin = _twins()
    compiled = ember.compile(twin, backend=functools.partial(inductor, options=FORCED))
    x = torch.randn(2, 3, 7, 5, dtype=torch.bfloat16, requires_grad=True)
    compiled(x).float().sum().backward()
    backward = [source for source in output_code.wrappers if "convolution_backward" in source]
    assert len(backward) == 1
    calls = _calls(backward[0])
    assert calls.count("convolution_backward") == 3
    # the reduction's two gradients and the classifier's input and weight gradients
    assert calls.count("mm") == 4


@pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
    reason="needs a CUDA GPU (EMBER_TEST_DEVICE=cuda on the GPU machine)",
)
def test_autocast_training_on_the_gpu_is_as_accurate_as_eager(output_code: Any) -> None:
    """ResNet's setting on the GPU: float32 parameters under bfloat16 autocast, the layout
    chosen by the default `auto`. The unit convolutions run as cuBLAS products; the output's
    and every gradient's error against a float64 run stays within twice eager's (cuDNN's)."""
    torch.manual_seed(0)
    model, twin, exact = Bottleneck().cuda(), Bottleneck().cuda(), Bottleneck().cuda().double()
    twin.load_state_dict(model.state_dict())
    exact.load_state_dict(model.state_dict())
    backend = functools.partial(inductor, options={"cache": False})
    compiled = ember.compile(twin, backend=backend)
    x = torch.randn(4, 3, 16, 12, device="cuda")
    with torch.autocast("cuda", torch.bfloat16):
        ours, theirs = compiled(x), model(x)
    reference = exact(x.double())
    for out in (ours, theirs, reference):
        out.double().square().sum().backward()
    assert any("ops['aten::mm.default']" in source for source in output_code.wrappers)

    def within(value: torch.Tensor, eager: torch.Tensor, exact_value: torch.Tensor) -> bool:
        ours, theirs = ((v.double() - exact_value).abs().max().item() for v in (value, eager))
        return ours <= 2 * theirs + 1e-3 * exact_value.abs().max().item()

    assert within(ours, theirs, reference)
    for (name, a), b, c in zip(twin.named_parameters(), model.parameters(), exact.parameters()):
        assert a.grad is not None and b.grad is not None and c.grad is not None, name
        assert within(a.grad, b.grad, c.grad), name
