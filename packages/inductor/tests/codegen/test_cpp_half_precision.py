"""bfloat16 and float16 in C++ kernels (`codegen/cpp/half_precision.py`): loads widen to
float, bodies compute in float, stores round to nearest even as eager's conversions do, and
the loops stay vectorized. Before, every op touching a 16-bit tensor fell back to its ATen
kernel, one call each (a bf16 autocast region ran op by op)."""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ember
import ember.prims as prims
from ember.inductor.codegen.cpp.compiler import COMPILER
from ember.inductor.pipeline import compile_graph

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from cpp_build import (  # noqa: E402
    vectorized_loops,
)

pytestmark = pytest.mark.skipif(shutil.which(COMPILER) is None, reason="no C++ compiler")

HALF = [torch.bfloat16, torch.float16]
# one unit in the last place near 1: bf16 keeps 8 significant bits, fp16 11
TOLERANCE = {torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def _compiled(
    fn: Callable[..., torch.Tensor], *inputs: torch.Tensor, caplog: pytest.LogCaptureFixture
) -> object:
    """`fn` compiled for the C++ backend, checked to have fallen back to no eager kernel."""
    with caplog.at_level(logging.INFO, logger="ember.inductor.perf_hints"):
        compiled = compile_graph(prims.trace(fn, *inputs), inputs)
    fallbacks = [r.getMessage() for r in caplog.records if "falls back" in r.getMessage()]
    assert not fallbacks
    return compiled


def _random(*size: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return torch.randn(*size, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_conversions_round_as_eager_does(dtype: torch.dtype) -> None:
    # every 16-bit pattern widens exactly; random float32 bit patterns (subnormals, overflow
    # to infinity, ties) and special values narrow to eager's bits, a NaN to a NaN
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 18,), generator=torch.Generator())
    specials = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 65504.0, 65520.0,
                65519.99, 2**-24, 2**-25, 3 * 2**-26, 1e-40, -1e-45, 3.4e38, 1 + 2**-8]  # fmt: skip
    floats = torch.cat([bits.to(torch.int32).view(torch.float32), torch.tensor(specials)])
    narrow = compile_graph(prims.trace(lambda t: t.to(dtype), floats), (floats,))
    ours, eager = narrow(floats), floats.to(dtype)
    assert isinstance(ours, torch.Tensor)
    nan = eager.isnan()
    assert torch.equal(ours[~nan].view(torch.int16), eager[~nan].view(torch.int16))
    assert ours[nan].isnan().all()

    patterns = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    widen = compile_graph(prims.trace(lambda t: t.float() * 2, patterns), (patterns,))
    wide = widen(patterns)
    assert isinstance(wide, torch.Tensor)
    torch.testing.assert_close(wide, patterns.float() * 2, rtol=0, atol=0, equal_nan=True)


def _arithmetic(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # correctly rounded float ops only, so that the float results are eager's bit for bit
    return ((x * y + 1.5).relu() / (y.abs() + 1)).sqrt() * 0.1 - torch.where(x > 0, x, y)


def _transcendental(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x * y + 1.5).sigmoid() * 0.1 - torch.tanh(y).exp()


def _two_operand_chain(
    fn: Any, dtype: torch.dtype, caplog: pytest.LogCaptureFixture
) -> tuple[torch.Tensor, torch.Tensor, Any, torch.Tensor]:
    """`fn` of two 64x300 `dtype` tensors, compiled: the operands, the compiled function and
    its result."""
    x, y = _random(64, 300, dtype=dtype), _random(64, 300, dtype=dtype, seed=1)
    compiled = _compiled(fn, x, y, caplog=caplog)
    return x, y, compiled, compiled(x, y)  # type: ignore[operator]


@pytest.mark.parametrize("dtype", HALF)
def test_a_pointwise_chain_rounds_its_float_result_once(
    dtype: torch.dtype, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    x, y, compiled, ours = _two_operand_chain(_arithmetic, dtype, caplog)
    assert ours.dtype == dtype
    # the chain computes in float and rounds on store: eager's rounding of the float result
    torch.testing.assert_close(ours, _arithmetic(x.float(), y.float()).to(dtype), rtol=0, atol=0)
    # eager rounds after every op: within a few 16-bit ulps of that
    tolerance = 2 * TOLERANCE[dtype]
    torch.testing.assert_close(ours, _arithmetic(x, y), rtol=tolerance, atol=tolerance)
    assert vectorized_loops(compiled.module, tmp_path) >= 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("dtype", HALF)
def test_a_transcendental_chain_is_a_vectorized_loop(
    dtype: torch.dtype, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    x, y, compiled, ours = _two_operand_chain(_transcendental, dtype, caplog)
    # erf, exp and tanh differ from eager's float kernels by an ulp or so before rounding
    float_result = _transcendental(x.float(), y.float()).to(dtype)
    torch.testing.assert_close(ours, float_result, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    tolerance = 2 * TOLERANCE[dtype]
    torch.testing.assert_close(ours, _transcendental(x, y), rtol=tolerance, atol=tolerance)
    assert vectorized_loops(compiled.module, tmp_path) >= 1  # type: ignore[attr-defined]


def test_casts_round_between_ops(caplog: pytest.LogCaptureFixture) -> None:
    # an explicit cast to bf16 inside a float chain rounds there, as eager's does; float16 and
    # bf16 mixed, an arange in bf16 (integers past 256 round)
    def mixed(x: torch.Tensor) -> torch.Tensor:
        step = torch.arange(x.shape[-1], dtype=torch.bfloat16)
        return (x.exp().to(torch.bfloat16).float() * 3).to(torch.float16) + step

    x = torch.randn(4, 1000)
    ours = _compiled(mixed, x, caplog=caplog)(x)  # type: ignore[operator]
    torch.testing.assert_close(ours, mixed(x), rtol=0, atol=0)


SOFTMAX_AND_NORMS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": lambda t: torch.softmax(t, dim=-1),
    "softmax in float": lambda t: torch.softmax(t, dim=-1, dtype=torch.float32),
    "log softmax": lambda t: torch.log_softmax(t, dim=-1),
    "layer norm": lambda t: torch.nn.functional.layer_norm(
        t, (t.shape[-1],), torch.linspace(0.5, 1.5, t.shape[-1], dtype=t.dtype)
    ),
}


@pytest.mark.parametrize("name", sorted(SOFTMAX_AND_NORMS))
@pytest.mark.parametrize("dtype", HALF)
def test_softmax_and_layer_norm(
    name: str, dtype: torch.dtype, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fn = SOFTMAX_AND_NORMS[name]
    x = _random(32, 384, dtype=dtype) * 4
    compiled = _compiled(fn, x, caplog=caplog)
    ours, eager = compiled(x), fn(x)  # type: ignore[operator]
    assert ours.dtype == eager.dtype
    torch.testing.assert_close(ours, eager, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    # every pass over a row (max, sum, output; mean, variance, output) is a SIMD loop
    assert vectorized_loops(compiled.module, tmp_path) >= 2  # type: ignore[attr-defined]


SUMS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "rows": lambda t: t.sum(dim=-1),
    "columns": lambda t: t.sum(dim=0),
    "all": lambda t: t.sum(),
    "mean": lambda t: t.mean(dim=-1),
    "in float": lambda t: t.sum(dim=-1, dtype=torch.float32),
    "max": lambda t: t.amax(dim=-1),
    "argmax": lambda t: t.argmax(dim=-1),
}


@pytest.mark.parametrize("name", sorted(SUMS))
@pytest.mark.parametrize("dtype", HALF)
def test_reductions(name: str, dtype: torch.dtype, caplog: pytest.LogCaptureFixture) -> None:
    # 4096 values a row: a sum accumulated in bf16 would be off by far more than one bf16 ulp
    fn = SUMS[name]
    x = _random(16, 4096, dtype=dtype) + 1
    x[3, 17] = float("nan")
    ours, eager = _compiled(fn, x, caplog=caplog)(x), fn(x)  # type: ignore[operator]
    assert ours.dtype == eager.dtype
    # against the sum of the same 16-bit values in float64, rounded once
    exact = fn(x.double()).to(eager.dtype) if eager.dtype.is_floating_point else eager
    torch.testing.assert_close(ours, exact, rtol=TOLERANCE[dtype], atol=0, equal_nan=True)


FALLBACKS_BEFORE: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "gather": lambda t, i: t.gather(1, i),
    "index add": lambda t, i: t.index_add(0, i[0, :4], t[:4]),  # atomic: still ATen's
    "scatter": lambda t, i: t.scatter(1, i, t[:, :5]),
    "cat and where": lambda t, i: torch.where(t > 0, torch.cat([t[:, 5:], t[:, :5]], 1), -t),
    "transposed": lambda t, i: (t.t().contiguous() + 1).t(),
    "cumulative": lambda t, i: t.cumsum(dim=1),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS_BEFORE))
@pytest.mark.parametrize("dtype", HALF)
def test_ops_that_fell_back_keep_their_values(name: str, dtype: torch.dtype) -> None:
    fn = FALLBACKS_BEFORE[name]
    x = _random(48, 40, dtype=dtype)
    index = torch.randint(0, 40, (48, 5), generator=torch.Generator().manual_seed(2))
    ours = compile_graph(prims.trace(fn, x, index), (x, index))(x, index)
    torch.testing.assert_close(ours, fn(x, index), rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def test_linear_gelu_linear_under_bf16_autocast_fuses(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32)).eval()
    compiled = ember.compile(model, backend="inductor")
    x = torch.randn(48, 64)
    with (
        torch.no_grad(),
        torch.autocast("cpu", dtype=torch.bfloat16),
        caplog.at_level(logging.INFO, logger="ember.inductor.perf_hints"),
    ):
        ours, eager = compiled(x), model(x)
    assert ours.dtype == eager.dtype == torch.bfloat16
    # the casts and the GELU round as eager's kernels do; the matmuls are eager's own
    torch.testing.assert_close(ours, eager, rtol=TOLERANCE[torch.bfloat16], atol=1e-2)
    # the weight casts and the GELU are C++ kernels: no prim fell back to its eager kernel
    assert not [r.getMessage() for r in caplog.records if "falls back" in r.getMessage()]


@pytest.mark.parametrize("dim", [0, 1])
def test_a_sum_kept_in_registers_is_rounded_as_stored(dim: int) -> None:
    # a 16-bit sum that a later op of the same kernel reads is never written, but eager
    # stores (rounds) it before multiplying: integer values sum exactly in float, so the
    # results are equal bit for bit (column sums run in outer_lanes.py's blocks)
    x = torch.randint(-64, 65, (1024, 64), generator=torch.Generator().manual_seed(0))
    x = x.to(torch.bfloat16) if dim == 0 else x.t().contiguous().to(torch.bfloat16)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return t.sum(dim) * 1.5

    ours = compile_graph(prims.trace(fn, x), (x,))(x)
    torch.testing.assert_close(ours, fn(x), rtol=0, atol=0)
