"""Reduction lowerings: the variance in one pass over its input (C++: shifted sums in
float64; Triton: float32 welford_m2 reductions), with eager's values where the data sit far
from zero, on constant slices, and where each slice's first element is far from its mean."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.ir.program import LoopNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.inductor.scheduler.fusion import Kernel, schedule
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache


def channel_statistics(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch norm's statistics: the mean and the biased variance of each channel."""
    return x.mean((0, 2, 3)), x.var((0, 2, 3), correction=0)


def test_variance_reads_its_input_in_one_kernel() -> None:
    """Two passes (the mean, then the squared deviations) read a ResNet-50 convolution's
    output twice for its batch norm (the second pass reads the first's result, so split on a
    GPU they are separate kernels); both sums of the shifted form share one kernel."""
    x = torch.randn(32, 16, 64, 64)
    graph = decompose(prims.trace(channel_statistics, x), DECOMPOSITIONS)
    program = lower_graph(graph, split_reductions=True)
    kernels = [k for k in schedule(program, "triton") if isinstance(k, Kernel)]
    readers = [k for k in kernels if any("in0" in m.node.reads() for m in k.members)]
    assert len(readers) == 1
    assert all(isinstance(n, LoopNode) for n in program.nodes)


def test_variance_equals_eager_far_from_zero_and_on_constant_slices(tmp_path: Any) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 7, 5, generator=generator) * 1e-2 + 1e3  # mean >> spread
    x[:, 2] = 3.25  # a constant channel: exactly zero, never a rounding's negative value

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            t.var((0, 2, 3), correction=0),
            t.var(1),
            t.var((1, 3), correction=2, keepdim=True),
        )

    compiled = compile_graph(prims.trace(fn, x), (x,), cache=ArtifactCache(tmp_path))
    exact = fn(x.double())
    for ours, theirs, eager in zip(compiled(x), exact, fn(x)):
        # as close to the float64 answer as eager's float32 two-pass kernel, up to a rounding
        # of the result itself
        error = (ours.double() - theirs).abs().max()
        rounding = 2 * torch.finfo(torch.float32).eps * theirs.abs().max()
        assert error <= 2 * (eager.double() - theirs).abs().max() + rounding
    assert torch.equal(compiled(x)[0][2], torch.tensor(0.0))


def _far_from_zero_with_padded_corners() -> torch.Tensor:
    """Batch-norm inputs where the shifted sums' pivot (each channel's first element) is far
    from the channel's mean in units of its spread: channels at 1000 std from zero whose
    corners are 0 (a convolution's zero padding), and a convolution of a ReLU's output with
    positive-mean weights (channel means several times their std, corners seeing the padding).
    In float32 the shifted form lost 5e-4 of these variances (eager: 1.3e-7)."""
    generator = torch.Generator().manual_seed(0)
    far = torch.randn(4, 4, 64, 64, generator=generator) + 1000
    far[:, :, 0, 0] = 0
    relu = torch.relu(torch.randn(4, 8, 64, 64, generator=generator))
    weight = torch.randn(4, 8, 3, 3, generator=generator) * 0.05 + 0.05
    conv = torch.nn.functional.conv2d(relu, weight, padding=1)
    return torch.cat([far, conv], 1)


def _batch_norm_training(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.ops.aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_batch_norm_statistics_as_accurate_as_eager_where_the_pivot_is_far(
    backend: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variance and the normalized output of a training batch norm against float64, on
    C++ and on Triton (interpreted; 16 384 elements a channel: split into float64 partials),
    within a few times eager's float32 error."""
    x = _far_from_zero_with_padded_corners()
    options: dict[str, Any] = {}
    if backend == "triton":
        pytest.importorskip("triton")
        from ember.inductor.codegen.triton import TritonBackend

        monkeypatch.setenv("TRITON_INTERPRET", "1")
        options["backend"] = TritonBackend()
    graph = prims.trace(_batch_norm_training, x)
    compiled = compile_graph(graph, (x,), cache=ArtifactCache(tmp_path), **options)
    out, _, invstd = compiled(x)
    exact_out, _, exact_invstd = _batch_norm_training(x.double())
    eager_out, _, eager_invstd = _batch_norm_training(x)

    def variance_error(inverse: torch.Tensor) -> float:
        variance, exact = inverse.double() ** -2, exact_invstd**-2
        return float(((variance - exact).abs() / exact).max())

    def output_error(output: torch.Tensor) -> float:
        return float((output.double() - exact_out).abs().max())

    eager_variance, eager_output = variance_error(eager_invstd), output_error(eager_out)
    assert variance_error(invstd) <= 4 * eager_variance, (variance_error(invstd), eager_variance)
    assert output_error(out) <= 4 * eager_output, (output_error(out), eager_output)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_half_precision_variance_rounds_once_from_float32(
    dtype: torch.dtype, backend: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The float64 spread of a bf16/fp16 variance reaches the output through float32, rounded
    once as eager rounds it: Triton's interpreter turned a direct float64 -> bfloat16 cast
    into denormals (var of values near 10 read 3e-39), and rounding the spread to bf16
    before dividing by n - 1 rounded twice."""
    options: dict[str, Any] = {}
    if backend == "triton":
        pytest.importorskip("triton")
        from ember.inductor.codegen.triton import TritonBackend

        monkeypatch.setenv("TRITON_INTERPRET", "1")
        options["backend"] = TritonBackend()
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 33, generator=generator) * 3 + 10).to(dtype)

    def variance(a: torch.Tensor) -> torch.Tensor:
        return torch.var(a, 1)

    graph = prims.trace(variance, x)
    out = compile_graph(graph, (x,), cache=ArtifactCache(tmp_path), **options)(x)
    assert out.dtype == dtype
    torch.testing.assert_close(out, variance(x.double()).to(dtype))


def _generated_kernels(fn: Any, *inputs: torch.Tensor) -> dict[str, tuple[str, dict[str, str]]]:
    """The Triton kernels generated for `fn` on CUDA tensors (sm_90 source, on this CPU):
    name -> (source, pointer types)."""
    import ast

    from ember.inductor.codegen.triton import TritonBackend
    from ember.inductor.config import InductorConfig
    from ember.inductor.pipeline import generate
    from ember.prims.config import load

    module = generate(prims.trace(fn, *inputs), TritonBackend(), load(InductorConfig),
                      torch.device("cuda"))["module"]  # fmt: skip
    launches = ast.literal_eval(module[module.index("KERNELS = ") + len("KERNELS = ") :].strip())
    sources = {part.split("(", 1)[0]: part for part in module.split("@triton.jit\ndef ")[1:]}
    return {name: (sources[name], launch["signature"]) for name, launch in launches.items()}


def test_gpu_batch_norm_statistics_read_their_input_in_float32() -> None:
    """A split variance over a bf16 channels-last map (ResNet-50's batch norm) accumulates
    in float32 (welford_m2): float64 sums ran these kernels at half float32's speed on the
    H100 (61 vs 36 us for a 51 MB map). Only the second half, over the partials, is float64."""
    pytest.importorskip("triton")
    x = torch.randn(32, 64, 56, 56).to(torch.bfloat16).to(memory_format=torch.channels_last)
    kernels = _generated_kernels(_batch_norm_training, x)
    readers = {n: k for n, k in kernels.items() if "*bf16" in k[1].values()}
    statistics = [n for n, (source, _) in readers.items() if "rnumel" in source]
    assert len(statistics) == 1, sorted(kernels)
    for name, (source, signature) in readers.items():
        assert "*fp64" not in signature.values() and "float64" not in source, name


def test_gpu_split_variance_sums_each_chunk_once() -> None:
    """A split variance's first kernel sums each chunk for the Chan merge, and the mean beside
    it sums the same chunks: one accumulator serves both (an add and a select an element)."""
    pytest.importorskip("triton")
    kernels = _generated_kernels(_batch_norm_training, _far_from_zero_with_padded_corners())
    first = [source for source, _ in kernels.values() if "ember_welford_m2(" in source]
    assert len(first) == 1
    assert first[0].count("tl.sum(") == 1, first[0]


@pytest.mark.parametrize("length", [300, 5000])  # one tile (persistent), and a looped row
def test_triton_variance_of_rows_far_from_zero_as_accurate_as_eager(
    length: int, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows 1000 standard deviations from zero whose first elements are 0: a float32 shift
    by the first element cancelled; Welford's float32 updates (means held as offsets from a
    recent value) and the two passes over a tile's registers are within a few times the
    error of float32 two passes (CPU eager's var accumulates in float64: 3e-8 here)."""
    pytest.importorskip("triton")
    from ember.inductor.codegen.triton import TritonBackend

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(6, length, generator=generator) + 1000
    x[:, 0] = 0

    def variance(a: torch.Tensor) -> torch.Tensor:
        return torch.var(a, 1)

    graph = prims.trace(variance, x)
    out = compile_graph(graph, (x,), cache=ArtifactCache(tmp_path), backend=TritonBackend())(x)
    exact = variance(x.double())
    two_pass = ((x - x.mean(1, keepdim=True)) ** 2).sum(1) / (length - 1)

    def error(value: torch.Tensor) -> float:
        return float(((value.double() - exact).abs() / exact).max())

    assert error(out) <= 4 * error(two_pass), (error(out), error(two_pass))
