"""Channels-last layout for convolution-heavy Graphs (`passes/channels_last.py`): which
values take NHWC strides, and values, gradients and batch-norm statistics equal eager's
with the layout forced on the CPU (`layout_optimization="channels_last"`)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import torch
from torch import nn

import ember
from ember import prims
from ember.inductor.backend import inductor
from ember.inductor.codegen.backend import CHANNELS_LAST_CONVOLUTIONS
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.config import InductorConfig
from ember.inductor.passes.channels_last import (
    channels_last,
    channels_last_strides,
    prefers_channels_last,
)
from ember.inductor.pipeline import (
    DECOMPOSITIONS,
    _wants_channels_last,
    compile_graph,
    generate,
)
from ember.prims import TensorSpec
from ember.prims.config import load
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache

CONVOLUTION = "aten::convolution.default"


class ConvNet(nn.Module):
    """A stem, max pooling, a residual block with batch norm, a strided 1x1 convolution and
    a classifier: the patterns of a ResNet. `flatten` ends with a view of the last feature
    map instead of a mean (a reader that takes its input's strides from the spec)."""

    def __init__(self, flatten: bool = False) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.stem_norm = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(8)
        self.down = nn.Conv2d(8, 16, 1, stride=2)
        self.flatten = flatten
        self.fc = nn.Linear(16 * 16 if flatten else 16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(torch.relu(self.stem_norm(self.stem(x))))
        z = self.norm(self.conv(y))
        z += y  # in place, as Hugging Face's ResNet adds its shortcut
        y = torch.relu(z)
        y = self.down(y)
        features = y.view(y.shape[0], -1) if self.flatten else y.mean((2, 3))
        return self.fc(features)


def _twins(flatten: bool = False) -> tuple[ConvNet, ConvNet]:
    torch.manual_seed(0)
    model, twin = ConvNet(flatten), ConvNet(flatten)
    twin.load_state_dict(model.state_dict())
    return model, twin


def _forced(tmp_path: Path) -> InductorConfig:
    return dataclasses.replace(
        load(InductorConfig), cache=False, layout_optimization="channels_last"
    )


def _is_channels_last(spec: TensorSpec) -> bool:
    return tuple(spec.strides) == channels_last_strides(spec.shape)


def test_convolution_buffers_take_channels_last_strides() -> None:
    model = ConvNet().eval()
    x = torch.randn(2, 3, 16, 16)
    graph = decompose(prims.trace(model, x), DECOMPOSITIONS)
    assert prefers_channels_last(graph, min_convolutions=1, min_share=0.0)
    laid = channels_last(graph)
    values = laid.values()
    convolutions = [node for node in laid.nodes if node.target == CONVOLUTION]
    assert len(convolutions) == 3
    for node in convolutions:
        result = node.outputs[0]
        assert isinstance(result, prims.Value) and isinstance(result.spec, TensorSpec)
        assert _is_channels_last(result.spec)
        for operand in node.args[:2]:
            assert isinstance(operand, prims.Ref)
            spec = values[operand.name].spec
            assert isinstance(spec, TensorSpec)
            _, c, h, w = spec.shape
            assert _is_channels_last(spec) or c == 1 or h * w == 1  # 1x1: both layouts alike
    # the in-place residual add returns its channels-last destination (the ReLU after it
    # read an NCHW copy: ResNet-50's ReLUs ran 10x slower than torch.compile's on the H100)
    writes = [node for node in laid.nodes if node.target == "prims::copy_to"]
    assert writes and all(
        isinstance(v.spec, TensorSpec) and _is_channels_last(v.spec)
        for node in writes
        for v in node.output_values()
    )
    # the pooled stem (the selects searching its windows) is channels-last: the next
    # convolution reads it
    pooled = [
        node
        for node in laid.nodes
        if node.target == "prims::where"
        and any(
            isinstance(v.spec, TensorSpec)
            and v.spec.dtype == torch.float32
            and tuple(v.spec.shape) == (2, 8, 8, 8)
            for v in node.output_values()
        )
    ]
    assert pooled and all(
        isinstance(v.spec, TensorSpec) and _is_channels_last(v.spec)
        for node in pooled
        for v in node.output_values()
    )


def test_one_convolution_stays_nchw() -> None:
    conv = nn.Conv2d(3, 8, 3)
    x = torch.randn(2, 3, 8, 8)
    single = decompose(prims.trace(conv, x), DECOMPOSITIONS)
    assert not prefers_channels_last(single)


def test_cpu_training_saves_channels_last_by_default() -> None:
    # the C++ backend states that its convolutions prefer channels-last, as Triton's do
    assert CHANNELS_LAST_CONVOLUTIONS in CppBackend.capabilities
    _, twin = _twins()
    compiled = ember.compile(twin, backend="inductor")
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        compiled(torch.randn(2, 3, 16, 16))
    assert any(
        t.dim() == 4
        and t.is_contiguous(memory_format=torch.channels_last)
        and not t.is_contiguous()
        for t in saved
    )


def test_inference_equals_eager_and_outputs_keep_strides(tmp_path: Path) -> None:
    model = ConvNet().eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        graph = prims.trace(model, x)
        compiled = compile_graph(
            graph, (x,), config=_forced(tmp_path), cache=ArtifactCache(tmp_path)
        )
        ours, theirs = compiled(x), model(x)
    assert ours.stride() == theirs.stride()
    torch.testing.assert_close(ours, theirs)


def test_view_of_a_channels_last_feature_map_reads_eager_order(tmp_path: Path) -> None:
    model = ConvNet(flatten=True).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        graph = prims.trace(model, x)
        compiled = compile_graph(
            graph, (x,), config=_forced(tmp_path), cache=ArtifactCache(tmp_path)
        )
        torch.testing.assert_close(compiled(x), model(x))


def test_training_saves_channels_last_and_gradients_equal_eager() -> None:
    model, twin = _twins()
    backend = functools.partial(inductor, options={"layout_optimization": "channels_last"})
    compiled = ember.compile(twin, backend=backend)
    x = torch.randn(2, 3, 16, 16)
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        ours = compiled(x)
    theirs = model(x)
    torch.testing.assert_close(ours, theirs)
    activations = [t for t in saved if t.dim() == 4 and t.shape[1] > 1 and t.shape[2] > 1]
    nhwc = [t for t in activations if t.is_contiguous(memory_format=torch.channels_last)]
    # convolutions' outputs (max pooling saves no int64 indices any more: its backward finds
    # each window's maximum again, `passes/joint_decompositions.py`; its windows searched by
    # selects, the cut recomputes the pooled map from the stem's output too)
    assert len(nhwc) >= 2 and all(not t.is_contiguous() for t in nhwc)
    ours.square().sum().backward()
    theirs.square().sum().backward()
    _assert_trained_alike(twin, model)


def _pool_backward(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    # 6x6 windows of stride 1: each element may lie in 36 windows, past which ember-prims
    # scatters the gradient through the indices rather than gathering it
    return torch.ops.aten.max_pool2d_with_indices_backward(
        grad, x, [6, 6], [1, 1], [3, 3], [1, 1], False, indices
    )


def test_max_pooling_gradient_accumulates_along_channels() -> None:
    x = torch.randn(2, 8, 16, 16)
    pooled, indices = torch.ops.aten.max_pool2d_with_indices(x, [6, 6], [1, 1], [3, 3])
    grad = torch.randn_like(pooled)
    graph = decompose(prims.trace(_pool_backward, grad, x, indices), DECOMPOSITIONS)
    laid = channels_last(graph)
    scatters = [node for node in laid.nodes if node.target == "prims::scatter_add"]
    assert len(scatters) == 1
    (result,) = scatters[0].output_values()
    assert isinstance(result.spec, TensorSpec)
    assert tuple(result.spec.strides) == (8 * 256, 1, 8)  # [N, C, H*W], channels fastest
    torch.testing.assert_close(prims.run(laid, grad, x, indices), _pool_backward(grad, x, indices))


class OddNet(nn.Module):
    """Odd sizes everywhere (5 and 7 channels, a 15x13 image, windows that overhang the
    edges), batch norm, max and average pooling and an out-of-place residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 5, 3, padding=1)
        self.stem_norm = nn.BatchNorm2d(5)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv = nn.Conv2d(5, 5, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(5)
        self.down = nn.Conv2d(5, 7, 3, stride=2, padding=1)
        self.average = nn.AvgPool2d(2, 1)
        self.fc = nn.Linear(7, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(torch.relu(self.stem_norm(self.stem(x))))
        y = torch.relu(self.norm(self.conv(y)) + y)
        y = self.average(torch.relu(self.down(y)))
        return self.fc(y.amax((2, 3)))


def _odd_twins() -> tuple[OddNet, OddNet]:
    torch.manual_seed(0)
    model, twin = OddNet(), OddNet()
    twin.load_state_dict(model.state_dict())
    return model, twin


FORCED = functools.partial(inductor, options={"layout_optimization": "channels_last"})


def test_odd_sizes_inference_equals_eager_on_the_cpu() -> None:
    model, twin = _odd_twins()
    model.eval(), twin.eval()
    compiled = ember.compile(twin, backend=FORCED)
    x = torch.randn(3, 3, 15, 13)
    x[0, 1, 4, 5] = float("nan")  # a NaN in a pooling window gives NaN, as eager
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), equal_nan=True)
        y = torch.randn(3, 3, 15, 13)
        torch.testing.assert_close(compiled(y), model(y))


def test_odd_sizes_training_equals_eager_on_the_cpu() -> None:
    model, twin = _odd_twins()
    compiled = ember.compile(twin, backend=FORCED)
    for _ in range(2):  # the second step reads the batch-norm statistics the first wrote
        x = torch.randn(3, 3, 15, 13, requires_grad=True)
        x_twin = x.detach().clone().requires_grad_()
        ours, theirs = compiled(x_twin), model(x)
        torch.testing.assert_close(ours, theirs)
        ours.square().sum().backward()
        theirs.square().sum().backward()
        assert x.grad is not None and x_twin.grad is not None
        torch.testing.assert_close(x_twin.grad, x.grad)
        _assert_trained_alike(twin, model)


class _NchwCpp(CppBackend):
    capabilities = CppBackend.capabilities - {CHANNELS_LAST_CONVOLUTIONS}


class _NhwcCpp(CppBackend):
    capabilities = CppBackend.capabilities | {CHANNELS_LAST_CONVOLUTIONS}


def test_auto_layout_follows_the_backends_capability() -> None:
    model = ConvNet().eval()
    x = torch.randn(2, 3, 16, 16)
    graph = decompose(prims.trace(model, x), DECOMPOSITIONS)
    assert prefers_channels_last(graph)
    config = dataclasses.replace(load(InductorConfig), cache=False, layout_optimization="auto")
    # the stem convolution's result in channels-last strides, as the wrapper prints them
    stem = "(" + "".join(f"{s}, " for s in channels_last_strides((2, 8, 16, 16))) + ")"
    assert stem in generate(graph, _NhwcCpp(), config)["wrapper"]
    assert stem not in generate(graph, _NchwCpp(), config)["wrapper"]
    off = dataclasses.replace(config, layout_optimization="off")
    assert stem not in generate(graph, _NhwcCpp(), off)["wrapper"]


def _assert_trained_alike(twin: torch.nn.Module, model: torch.nn.Module) -> None:
    """The compiled twin's parameter gradients (values and strides) and buffers (batch-norm
    statistics) equal eager's after the same backward."""
    for a, b in zip(twin.parameters(), model.parameters()):
        assert a.grad is not None and b.grad is not None
        assert a.grad.stride() == b.grad.stride()
        torch.testing.assert_close(a.grad, b.grad)
    for ours, eager in zip(twin.buffers(), model.buffers()):
        torch.testing.assert_close(ours, eager)


class DepthwiseBlock(nn.Module):
    """ConvNeXt's pattern: a patchify stem, a depthwise 7x7 convolution, then a layer norm
    and an MLP over the channels (NHWC by permutes): its matmuls outweigh its convolutions."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 4, stride=4)
        self.depthwise = nn.Conv2d(16, 16, 7, padding=3, groups=16)
        self.norm = nn.LayerNorm(16)
        self.up, self.down = nn.Linear(16, 64), nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.norm(self.depthwise(x).permute(0, 2, 3, 1))
        return x + self.down(torch.nn.functional.gelu(self.up(y))).permute(0, 3, 1, 2)


def test_a_depthwise_convolution_runs_channels_last_on_the_cpu(tmp_path: Path) -> None:
    """oneDNN's NCHW depthwise convolutions are many times slower than its NHWC ones (7x7
    over 4x256x2x2: 1052 against 61 us), so the C++ backend's graphs with one run
    channels-last though their matmuls dominate (ConvNeXt inference 0.91x -> 1.36x eager)."""
    model = DepthwiseBlock().eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        graph = decompose(prims.trace(model, x), DECOMPOSITIONS)
        assert not prefers_channels_last(graph)
        assert prefers_channels_last(graph, depthwise=True)
        # a training forward keeps NCHW: the convolutions' gradients ran slower NHWC
        assert not _wants_channels_last(graph, load(InductorConfig), CppBackend(), training=True)
        config = dataclasses.replace(load(InductorConfig), cache=False)
        # the depthwise convolution reads the stem's result in channels-last strides
        stem = "(" + "".join(f"{s}, " for s in channels_last_strides((2, 16, 8, 8))) + ")"
        assert stem in generate(graph, CppBackend(), config)["wrapper"]
        compiled = compile_graph(prims.trace(model, x), (x,), cache=ArtifactCache(tmp_path))
        ours, theirs = compiled(x), model(x)
    assert ours.stride() == theirs.stride()
    torch.testing.assert_close(ours, theirs)


class _ConvAttention(nn.Module):
    """Two convolutions, then attention over their maps as MobileViT's layers compute it:
    the softmax of a 4-D map (placed channels-last, saved for the backward) times another,
    a matmul that broadcasts both and views them as a batch of matrices."""

    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Conv2d(3, 4, 3, padding=1)
        self.value = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.softmax(self.query(x) * 0.5, dim=-1)  # (batch, 4 heads, 6, 6)
        return (scores @ self.value(x)).square().mean()


def test_a_saved_map_viewed_in_the_backward_reads_eager_order() -> None:
    """The backward reads the saved softmax (channels-last, the forward's choice) through a
    broadcast then a view into the batch of a matmul: a view of the restrided input takes its
    strides from a spec that still says NCHW, so it must read a clone (it read the map in the
    wrong order: gradients off by percents, MobileViT's on the CPU)."""
    torch.manual_seed(0)
    model, twin = _ConvAttention(), _ConvAttention()
    twin.load_state_dict(model.state_dict())
    compiled = ember.compile(twin, backend=FORCED)
    x = torch.randn(2, 3, 6, 6)
    ours, theirs = compiled(x), model(x)
    torch.testing.assert_close(ours, theirs)
    ours.backward()
    theirs.backward()
    for a, b in zip(twin.parameters(), model.parameters()):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad)
