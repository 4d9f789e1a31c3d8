"""Training kernels of a transformer layer are loops GCC vectorizes: a value a kernel stores
for a row before the row's loops (a layer norm's 1/std kept for the backward) is read from
its variable, and the layer-norm and GELU backward kernels leave no row loop scalar, at
feature counts that are and are not a multiple of the vector width, in float32 and bfloat16.

BERT's training forward fused a GELU, a layer norm saving its 1/std and five dropout masks
into one kernel; its output loop reloaded the stored 1/std, which GCC could not keep in a
register past the loop's 33 stores: the reload went into the loop's latch and the loop, five
Philox draws an element included, ran scalar ("latch block not empty"). Checked on GCC's own
report of the generated modules."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
import ember.prims as prims
from ember.inductor.pipeline import compile_graph

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from cpp_build import needs_compiler, vectorization_report  # noqa: E402

# GCC's reasons for leaving a loop scalar that mean a kernel's row loop lost its SIMD code
# (the others it gives are about loop nests and the scalar remainders of lane blocks)
SCALAR_LOOPS = (
    "control flow in loop",
    "latch block not empty",
    "no vectype",
    "data ref analysis failed",
    "function call",
)

aten = torch.ops.aten


def scalar_loops(module: str, directory: Path) -> list[str]:
    return [
        line
        for line in vectorization_report(module, directory, "missed")
        if any(reason in line for reason in SCALAR_LOOPS)
    ]


@needs_compiler
def test_a_bert_layers_training_kernels_are_vectorized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output_code: Any
) -> None:
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("EMBER_INDUCTOR_CACHE", "0")  # generated here, not found in a cache
    torch.manual_seed(0)
    config = transformers.BertConfig(
        num_hidden_layers=1,
        hidden_size=128,
        num_attention_heads=4,
        intermediate_size=256,
        vocab_size=256,
    )
    model = transformers.BertModel(config).train()  # dropout 0.1 on
    tokens = torch.randint(0, 256, (2, 64))
    compiled = ember.compile(model, backend="inductor")
    compiled(input_ids=tokens).last_hidden_state.sum().backward()
    modules = output_code.kernels
    assert len(modules) == 2  # forward, backward
    forward = modules[0]
    assert "ember_random_uniform" in forward and "std::erf" in forward
    # the transposed copies' loops with division indices and the cross-entropy-free tail
    # are not what this checks: only the row loops' reasons above are
    missed = [line for m in modules for line in _row_loop_misses(m, tmp_path)]
    assert not missed, missed


def _row_loop_misses(module: str, directory: Path) -> list[str]:
    """Scalar-loop reasons on lines of kernels that loop over rows (have reduction loops)."""
    lines = module.splitlines()
    row_kernels: list[tuple[int, int]] = []
    start = None
    for number, line in enumerate(lines, start=1):
        if line.startswith('extern "C" void '):
            start = number
        elif line == "}" and start is not None:
            if any("r0" in text for text in lines[start - 1 : number]):
                row_kernels.append((start, number))
            start = None
    found = []
    for line in scalar_loops(module, directory):
        at = int(line.split(":")[1])
        if any(first <= at <= last for first, last in row_kernels):
            found.append(line)
    return found


def _layer_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    return aten.native_layer_norm_backward(
        grad, x, [x.shape[-1]], mean, rstd, weight, bias, [True, True, True]
    )


def _gelu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return aten.gelu_backward(grad, x)


def _tanh_gelu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return aten.gelu_backward(grad, x, approximate="tanh")


def _backward_case(name: str, width: int, dtype: torch.dtype) -> tuple[object, tuple]:
    generator = torch.Generator().manual_seed(width)
    x, grad = (torch.randn(64, width, generator=generator).to(dtype) for _ in range(2))
    if name != "layer_norm":
        return {"gelu": _gelu_backward, "tanh_gelu": _tanh_gelu_backward}[name], (grad, x)
    weight, bias = (torch.randn(width, generator=generator).to(dtype) for _ in range(2))
    _, mean, rstd = aten.native_layer_norm(x, [width], weight, bias, 1e-5)
    return _layer_norm_backward, (grad, x, mean, rstd, weight, bias)


def _results(value: object) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]  # type: ignore[list-item]


BACKWARDS = ["layer_norm", "gelu", "tanh_gelu"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("width", [7, 100, 128, 300])
@pytest.mark.parametrize("name", BACKWARDS)
def test_norm_and_activation_backwards_equal_eager(
    name: str, width: int, dtype: torch.dtype
) -> None:
    fn, inputs = _backward_case(name, width, dtype)
    compiled = compile_graph(prims.trace(fn, *inputs), inputs)  # type: ignore[arg-type]
    got, want = _results(compiled(*inputs)), _results(fn(*inputs))  # type: ignore[operator]
    if dtype == torch.float32:
        for ours, eager in zip(got, want):
            torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-4)
        return
    # bfloat16: eager's weight and bias gradients add 64 rows in bfloat16, ember's in float;
    # each result is checked against float64 instead, no further off than eager (or than
    # bfloat16's rounding of the exact value)
    exact = _results(fn(*(t.double() if t.is_floating_point() else t for t in inputs)))  # type: ignore[operator]
    for ours, eager, truth in zip(got, want, exact):
        assert ours.dtype == eager.dtype
        ours_error = (ours.double() - truth).abs().max().item()
        eager_error = (eager.double() - truth).abs().max().item()
        rounding = (truth.to(dtype).double() - truth).abs().max().item()
        assert ours_error <= max(1.5 * eager_error, 2 * rounding), (ours_error, eager_error)


@needs_compiler
@pytest.mark.parametrize("width", [100, 128, 300])
@pytest.mark.parametrize("name", BACKWARDS)
def test_norm_and_activation_backwards_leave_no_row_loop_scalar(
    name: str, width: int, tmp_path: Path
) -> None:
    fn, inputs = _backward_case(name, width, torch.float32)
    compiled = compile_graph(prims.trace(fn, *inputs), inputs)  # type: ignore[arg-type]
    assert not _row_loop_misses(compiled.module, tmp_path)
