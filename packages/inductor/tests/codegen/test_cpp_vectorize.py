"""The C++ kernels' hot loops are ones GCC vectorizes, and their values stay eager's.

Vectorization is checked on the compiler's own report (`-fopt-info-vec-optimized`: the loops
it turned into SIMD code), not by reading the generated text. Before lane reductions a row
max (and so a softmax's first pass) was a scalar loop: GCC does not vectorize a loop-carried
NaN-propagating max.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.pipeline import compile_graph

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from cpp_build import (  # noqa: E402
    called_functions,
    disassembly,
    disassembly_for_target,
    mnemonics,
    needs_compiler,
    needs_objdump,
    vectorized_loops,
)


def _compiled(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> object:
    compiled = compile_graph(prims.trace(fn, *inputs), inputs)
    torch.testing.assert_close(compiled(*inputs), fn(*inputs), equal_nan=True)
    return compiled


@needs_compiler
def test_a_row_max_is_a_vectorized_loop(tmp_path: Path) -> None:
    x = torch.randn(64, 256)
    compiled = _compiled(lambda t: t.amax(dim=-1), x)
    assert vectorized_loops(compiled.module, tmp_path) >= 1  # type: ignore[attr-defined]


@needs_compiler
def test_every_pass_of_a_row_softmax_is_a_vectorized_loop(tmp_path: Path) -> None:
    # max, sum of exponentials, normalized exponentials: three loops over a row
    x = torch.randn(64, 256)
    compiled = _compiled(lambda t: torch.softmax(t, dim=-1), x)
    assert vectorized_loops(compiled.module, tmp_path) >= 3  # type: ignore[attr-defined]


@needs_compiler
def test_a_float_sum_over_two_dims_is_a_vectorized_loop(tmp_path: Path) -> None:
    # a batch norm's per-channel sums over (N, H*W) in its backward: the last loop adds in
    # float lanes (it was a scalar chain of double adds, 1.6 ms a small_cnn training step)
    # against a float64 sum: eager's own float32 sum of 8192 values is off by ~1e-5 (an
    # unseeded draw once failed a float32-to-float32 comparison at atol 1e-5)
    x = torch.randn(8, 16, 1024, generator=torch.Generator().manual_seed(0))
    compiled = compile_graph(prims.trace(lambda t: t.sum(dim=(0, 2)), x), (x,))
    got = compiled(x)
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got.double(), x.double().sum(dim=(0, 2)), rtol=1e-5, atol=1e-4)
    assert vectorized_loops(compiled.module, tmp_path) >= 1


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # a causal attention's softmax: scaled scores, a bool mask of the kept positions
    return torch.softmax((scores / 5.65).masked_fill(~mask, float("-inf")), dim=-1)


@needs_compiler
def test_every_pass_of_a_masked_softmax_is_a_vectorized_loop(tmp_path: Path) -> None:
    # loads through a `bool*` kept GCC from vectorizing the max and the sum of exponentials
    # (TinyDecoder's attention softmax at 16x256 tokens: 37 ms a call against eager's ~17)
    scores = torch.randn(8, 64, 64, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(64, 64, dtype=torch.bool).tril()
    mask[5] = False  # a row with every position masked: eager's softmax is NaN there
    compiled = compile_graph(prims.trace(_masked_softmax, scores, mask), (scores, mask))
    torch.testing.assert_close(
        compiled(scores, mask), _masked_softmax(scores, mask), equal_nan=True
    )
    assert vectorized_loops(compiled.module, tmp_path) >= 3  # type: ignore[attr-defined]


BOOLEAN: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "compare and mask": lambda t, m: (t > 0) & m,
    "where on a mask": lambda t, m: torch.where(m, t, -t),
    "mask as float": lambda t, m: m.float() * t + (~m).float(),
    "any over a row": lambda t, m: (m & (t > 1)).any(dim=-1),
    "all over a row": lambda t, m: (m | (t > -1)).all(dim=-1),
}


@pytest.mark.parametrize("name", sorted(BOOLEAN))
@pytest.mark.parametrize("width", [7, 64])
def test_bool_loads_and_stores_equal_eager(name: str, width: int) -> None:
    fn = BOOLEAN[name]
    x = torch.randn(5, width, generator=torch.Generator().manual_seed(width))
    mask = torch.rand(5, width, generator=torch.Generator().manual_seed(1)) > 0.3
    compiled = compile_graph(prims.trace(fn, x, mask), (x, mask))
    torch.testing.assert_close(compiled(x, mask), fn(x, mask))


@needs_compiler
def test_a_bool_result_is_stored_by_a_vectorized_loop(tmp_path: Path) -> None:
    # a dropout's or a ReLU's mask kept for the backward, stored through bytes
    x = torch.randn(256, 256)
    mask = torch.rand(256, 256) > 0.5
    fn = BOOLEAN["compare and mask"]
    compiled = compile_graph(prims.trace(fn, x, mask), (x, mask))
    torch.testing.assert_close(compiled(x, mask), fn(x, mask))
    assert vectorized_loops(compiled.module, tmp_path) >= 1  # type: ignore[attr-defined]


EXTREMA: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "amax": lambda t: t.amax(dim=-1),
    "amin": lambda t: t.amin(dim=-1),
    "max of a product": lambda t: (t * 2.0).amax(dim=-1),
}


@pytest.mark.parametrize("name", sorted(EXTREMA))
@pytest.mark.parametrize("width", [5, 16, 37, 256])
def test_row_extrema_equal_eager_with_nan_inf_and_tails(name: str, width: int) -> None:
    fn = EXTREMA[name]
    x = torch.randn(6, width, generator=torch.Generator().manual_seed(width))
    x[1, width // 2] = float("nan")  # a NaN in a lane, in the middle
    x[2, width - 1] = float("nan")  # a NaN in the scalar tail (when width % 16)
    x[3, :] = float("-inf")
    x[4, :] = float("inf")
    x[5, 0] = float("nan")
    compiled = compile_graph(prims.trace(fn, x), (x,))
    torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_row_extrema_equal_eager(dtype: torch.dtype) -> None:
    x = torch.randint(-1000, 1000, (7, 45), dtype=dtype, generator=torch.Generator().manual_seed(0))
    for fn in (lambda t: t.amax(dim=-1), lambda t: t.amin(dim=-1)):
        compiled = compile_graph(prims.trace(fn, x), (x,))
        torch.testing.assert_close(compiled(x), fn(x))


@needs_objdump
@needs_compiler
def test_a_column_sum_adds_packed_doubles(tmp_path: Path) -> None:
    # A sum over dim 0 reads its reduction loop a row apart: GCC reports that loop
    # "vectorized" yet emits one scalar `vaddsd` per element. The lanes make the loop that
    # reads the input run along a row, and its float32 values add into double accumulators
    # with packed `vaddpd` (checked on the machine code, where the report is not reliable).
    x = torch.randn(64, 256)
    compiled = _compiled(lambda t: t.sum(dim=0), x)
    used = mnemonics(disassembly(compiled.module, tmp_path))  # type: ignore[attr-defined]
    assert "vaddpd" in used, sorted(set(m for m in used if "add" in m))


def _mnemonics(module: str, directory: Path) -> set[str]:
    return set(mnemonics(disassembly(module, directory)))


@needs_objdump
@needs_compiler
def test_a_row_sum_adds_at_float_width(tmp_path: Path) -> None:
    # converting every float32 value to the double accumulator halved the vector width
    # (0.41 against 0.27 ms on a 4096x1024 row sum); chunks of 256 now add in float lanes
    # Two float32 sums of 1024 values differ by a few units in the last place (2.3e-5 apart
    # on some rows, over eager's 1e-5 tolerance), so both are held against a float64 sum:
    # ember's error stays within twice eager's own
    x = torch.randn(64, 1024, generator=torch.Generator().manual_seed(37))
    compiled = compile_graph(prims.trace(lambda t: t.sum(dim=-1), x), (x,))
    exact = x.double().sum(dim=-1)
    ours = (compiled(x).double() - exact).abs().max().item()
    eagers = (x.sum(dim=-1).double() - exact).abs().max().item()
    assert ours <= 2 * eagers, (ours, eagers)
    assert "vaddps" in _mnemonics(compiled.module, tmp_path)  # type: ignore[attr-defined]


@needs_objdump
@needs_compiler
def test_a_row_sum_adds_its_chunks_lanes_as_packed_doubles(tmp_path: Path) -> None:
    # a chunk's 16 float lanes were combined one by one (16 dependent `vaddss`) before one
    # scalar double add, four times a row of 1024: now each lane has its own double, added
    # with packed `vaddpd`, and only the 16 doubles are combined, once a row
    x = torch.randn(64, 1024, generator=torch.Generator().manual_seed(3))
    compiled = compile_graph(prims.trace(lambda t: t.sum(dim=-1), x), (x,))
    exact = x.double().sum(dim=-1)
    ours = (compiled(x).double() - exact).abs().max().item()
    eagers = (x.sum(dim=-1).double() - exact).abs().max().item()
    assert ours <= 2 * eagers, (ours, eagers)
    used = mnemonics(disassembly(compiled.module, tmp_path))  # type: ignore[attr-defined]
    assert "vaddpd" in used and "vcvtps2pd" in used, sorted(set(used))
    assert "vaddss" not in used, used.count("vaddss")


@needs_objdump
@needs_compiler
def test_a_softmax_output_pass_multiplies_by_the_reciprocal(tmp_path: Path) -> None:
    # one division a row (hoisted out of the loop by GCC), a product an element: the output
    # pass divided every element by the row's sum (`vdivps` a vector)
    x = torch.randn(8, 1024)
    compiled = _compiled(lambda t: torch.softmax(t, dim=-1), x)
    used = mnemonics(disassembly(compiled.module, tmp_path))  # type: ignore[attr-defined]
    assert "vdivps" not in used and "vmulps" in used, sorted(set(used))


@pytest.mark.parametrize("width", [5, 16, 40, 257, 1000])
def test_row_sums_with_partial_blocks_and_chunks_equal_eager(width: int) -> None:
    # whole 16-value blocks, a chunk cut short by the row's end, and the rest of the row
    x = torch.randn(6, width, generator=torch.Generator().manual_seed(width)) + 2

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return t.sum(dim=-1), torch.softmax(t, dim=-1), F.layer_norm(t, (width,))

    compiled = compile_graph(prims.trace(fn, x), (x,))
    for ours, theirs in zip(compiled(x), fn(x), strict=True):  # type: ignore[call-overload]
        torch.testing.assert_close(ours, theirs)


COLUMN_REDUCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sum over dim 0": lambda t: t.sum(dim=0),
    "amax over dim 0": lambda t: t.amax(dim=0),
    "amin over dim 0": lambda t: t.amin(dim=0),
    "mean over dim 0": lambda t: t.mean(dim=0),
    "var over dim 0": lambda t: t.var(dim=0),
    "softmax over dim 0": lambda t: torch.softmax(t, dim=0),
    "sum over the middle dim": lambda t: t.reshape(t.shape[0], 2, -1).sum(dim=1),
    "sum over dims 0 and 1 of a 3-d view": lambda t: t.reshape(2, -1, t.shape[1]).sum(dim=(0, 1)),
}


@pytest.mark.parametrize("name", sorted(COLUMN_REDUCTIONS))
@pytest.mark.parametrize("width", [24, 160, 300])
def test_column_reductions_equal_eager_with_nan_and_tails(name: str, width: int) -> None:
    fn = COLUMN_REDUCTIONS[name]
    x = torch.randn(12, width, generator=torch.Generator().manual_seed(width))
    x[3, 5] = float("nan")
    x[7, width - 1] = float("nan")  # in the scalar remainder of the outer loop
    x[:, 9] = float("-inf")
    compiled = compile_graph(prims.trace(fn, x), (x,))
    torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)


def test_integer_column_sums_equal_eager() -> None:
    x = torch.randint(
        -1000, 1000, (9, 70), dtype=torch.int32, generator=torch.Generator().manual_seed(0)
    )
    for fn in (lambda t: t.sum(dim=0), lambda t: t.amax(dim=0)):
        compiled = compile_graph(prims.trace(fn, x), (x,))
        torch.testing.assert_close(compiled(x), fn(x))


TRANSPOSED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "transposed copy": lambda t: (t.t() * 2.0).contiguous(),
    "transposed plus straight": lambda t: t.t() + t,
    "batched transpose": lambda t: (
        t.reshape(2, -1, t.shape[1]).transpose(1, 2) + 1.0
    ).contiguous(),
}


@pytest.mark.parametrize("name", sorted(TRANSPOSED))
@pytest.mark.parametrize("size", [16, 40])
def test_transposed_reads_equal_eager_with_partial_tiles(name: str, size: int) -> None:
    fn = TRANSPOSED[name]
    x = torch.randn(size, size, generator=torch.Generator().manual_seed(size))
    compiled = compile_graph(prims.trace(fn, x), (x,))
    torch.testing.assert_close(compiled(x), fn(x))


def _calls(module: str, directory: Path, callee: str) -> int:
    """How many call sites of functions whose name holds `callee` the built library has."""
    return sum(callee in name for name in called_functions(disassembly(module, directory)))


@needs_compiler
def test_a_row_softmax_calls_exp_in_one_loop() -> None:
    # the sum loop keeps its exponentials for the output loop, which used to recompute them.
    # Counted in the kernel's source: GCC unrolls the sum's loop of 16-value blocks, so one
    # call in the source is several call sites in the library
    x = torch.randn(8, 1024)
    compiled = _compiled(lambda t: torch.softmax(t, dim=-1), x)
    kernel = compiled.module.split('extern "C"', 1)[1]  # type: ignore[attr-defined]
    assert kernel.count("exp(") == 1, kernel


def _checked_masked_softmax(batch: int, length: int) -> str:
    """The C++ module of a compiled causal masked softmax over `batch` x `length` x `length`
    scores, after checking its values against eager."""
    scores = torch.randn(batch, length, length, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    compiled = compile_graph(prims.trace(_masked_softmax, scores, mask), (scores, mask))
    torch.testing.assert_close(compiled(scores, mask), _masked_softmax(scores, mask))
    return compiled.module  # type: ignore[attr-defined,no-any-return]


@needs_objdump
@needs_compiler
def test_a_masked_softmax_calls_no_libm_exp(tmp_path: Path) -> None:
    # libmvec's expf runs a scalar call per lane for -inf (half of a causal mask's lanes):
    # TinyDecoder's softmax at 16x256 tokens spent 13 of its 15 ms there; ember_exp has no
    # slow path
    module = _checked_masked_softmax(batch=8, length=64)
    assert _calls(module, tmp_path, "v_expf") + _calls(module, tmp_path, "expf@") == 0
    assert _calls(module, tmp_path, "ember_exp") >= 1


def _callees(module: str, directory: Path) -> list[str]:
    """The functions the built library's call instructions reach, one entry a call site."""
    return called_functions(disassembly(module, directory))


@needs_objdump
@needs_compiler
def test_a_masked_softmax_over_short_rows_runs_exp_on_vectors(tmp_path: Path) -> None:
    # a row loop that loads the mask's bytes took 64 lanes, more than a row of 16 holds: GCC
    # unrolled it into 16 scalar ember_exp calls (4x16 tokens: 58 us a call, 25 us widened)
    callees = _callees(_checked_masked_softmax(batch=4, length=16), tmp_path)
    assert not [c for c in callees if "ember_exp" in c and not c.startswith("_ZGV")], callees
    assert [c for c in callees if "ember_exp" in c], callees


# the x86 vector widths GCC may pick under -march=native: SSE2 only, AVX2, AVX-512 tuned for
# 256-bit vectors (Skylake-SP to Rocket Lake in GCC 12), AVX-512 at 512 bits
X86_TARGETS = {
    "sse2": ("-march=x86-64",),
    "avx2": ("-march=haswell",),
    "avx512_prefer_256": ("-march=skylake-avx512", "-mprefer-vector-width=256"),
    "avx512_prefer_512": ("-march=skylake-avx512", "-mprefer-vector-width=512"),
}


@needs_objdump
@needs_compiler
@pytest.mark.parametrize("target", X86_TARGETS)
def test_a_masked_softmax_runs_exp_on_vectors_at_every_x86_vector_width(
    target: str, tmp_path: Path
) -> None:
    # a `static` ember_exp had one SIMD clone, AVX-512's 16 lanes wherever AVX-512F is on: on
    # a Rocket Lake (256-bit vectors preferred) every loop with an exp called it scalar
    module = _checked_masked_softmax(batch=4, length=16)
    callees = called_functions(disassembly_for_target(module, tmp_path, X86_TARGETS[target]))
    assert not [c for c in callees if "ember_exp" in c and not c.startswith("_ZGV")], callees
    assert [c for c in callees if "ember_exp" in c], callees


@pytest.mark.parametrize("width", [3, 16, 37, 64, 300])
def test_masked_softmax_over_widened_byte_rows_equals_eager(width: int) -> None:
    scores = torch.randn(2, 3, width, width, generator=torch.Generator().manual_seed(width))
    mask = torch.ones(width, width, dtype=torch.bool).tril()
    mask[1] = False  # every position masked: NaN in eager
    uint8_mask = (torch.rand(width, width, generator=torch.Generator().manual_seed(1)) > 0.5).to(
        torch.uint8
    )

    def by_bytes(t: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        # a uint8 row read by a sum, and by the output loop
        return t * m + (t * m).sum(-1, keepdim=True)

    for fn, second in ((_masked_softmax, mask), (by_bytes, uint8_mask)):
        compiled = compile_graph(prims.trace(fn, scores, second), (scores, second))
        torch.testing.assert_close(compiled(scores, second), fn(scores, second), equal_nan=True)


def test_masked_softmax_over_symbolic_rows_equals_eager() -> None:
    import ember

    compiled = ember.compile(_masked_softmax, dynamic=True)
    for width in (5, 16, 40):
        scores = torch.randn(3, width, width, generator=torch.Generator().manual_seed(width))
        mask = torch.ones(width, width, dtype=torch.bool).tril()
        mask[2] = False
        torch.testing.assert_close(
            compiled(scores, mask), _masked_softmax(scores, mask), equal_nan=True
        )


def test_float_exp_equals_eager_on_special_and_saturating_inputs() -> None:
    special = [float("-inf"), float("inf"), float("nan"), 0.0, -0.0, 1e-30, -1e-30, 1e-45]
    special += [-87.3, -87.4, -88.0, -100.0, -103.9, -103.98, -104.0, -104.1, -200.0]
    special += [88.0, 88.7, 88.72, 88.8, 104.0, 104.1, 1e30, -1e30, 0.5 * math.log(2)]
    sweep = torch.linspace(-110.0, 100.0, 40001)  # every range the polynomial and scaling meet
    x = torch.cat([torch.tensor(special), sweep, torch.randn(4096) * 10])
    for fn in (torch.exp, lambda t: torch.exp(t - t.amax()), torch.sigmoid):
        compiled = compile_graph(prims.trace(fn, x), (x,))
        torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)
    wide = x.double()
    compiled = compile_graph(prims.trace(torch.exp, wide), (wide,))
    torch.testing.assert_close(compiled(wide), torch.exp(wide), equal_nan=True)


REUSED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": lambda t: torch.softmax(t, dim=-1),
    "log_softmax": lambda t: torch.log_softmax(t, dim=-1),
    "softmax of a scaled input": lambda t: torch.softmax(t * 0.125, dim=-1),
    "exp normalized and added": lambda t: torch.exp(t) / torch.exp(t).sum(-1, keepdim=True) + t,
    "tanh mean subtracted": lambda t: torch.tanh(t) - torch.tanh(t).mean(-1, keepdim=True),
}


@pytest.mark.parametrize("name", sorted(REUSED))
@pytest.mark.parametrize("width", [7, 33, 256])
def test_row_values_reused_equal_eager(name: str, width: int) -> None:
    fn = REUSED[name]
    x = torch.randn(5, width, generator=torch.Generator().manual_seed(width))
    x[1, 2] = float("nan")
    x[2, :] = float("-inf")
    compiled = compile_graph(prims.trace(fn, x), (x,))
    torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)


def test_row_values_reused_by_two_outputs_equal_eager() -> None:
    def fn(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = torch.exp(t)
        return e * 2, e / e.sum(-1, keepdim=True)

    x = torch.randn(4, 300, generator=torch.Generator().manual_seed(0))
    compiled = compile_graph(prims.trace(fn, x), (x,))
    for value, expected in zip(compiled(x), fn(x), strict=True):
        torch.testing.assert_close(value, expected)


def _gelu_tanh(t: torch.Tensor) -> torch.Tensor:
    # GPT-2's activation (transformers' NewGELUActivation)
    return 0.5 * t * (1.0 + torch.tanh(0.7978845608028654 * (t + 0.044715 * torch.pow(t, 3.0))))


@needs_objdump
@needs_compiler
def test_the_tanh_gelu_cubes_by_products_not_pow_calls(tmp_path: Path) -> None:
    # `x ** 3` went to powf (vectorized by libmvec, which sends negative bases, half of
    # them here, to its scalar fallback): GPT-2's MLP activation took 0.65 ms a call against
    # 0.04 ms with the cube as two products, which is also how ATen's kernel computes it
    x = torch.randn(64, 1024)
    compiled = _compiled(_gelu_tanh, x)
    assert _calls(compiled.module, tmp_path, "pow") == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("exponent", [2.0, 3.0, -2.0, 0.5, -0.5, -1.0, 2.5, -3.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_powers_equal_eager(exponent: float, dtype: torch.dtype) -> None:
    x = torch.randn(40, dtype=dtype, generator=torch.Generator().manual_seed(0))
    x[:6] = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), -1.5])

    def fn(t: torch.Tensor) -> torch.Tensor:
        return torch.pow(t, exponent)

    compiled = compile_graph(prims.trace(fn, x), (x,))
    torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)


def test_tensor_powers_equal_eager() -> None:
    x = torch.randn(40, generator=torch.Generator().manual_seed(0)).abs()
    y = torch.randn(40, generator=torch.Generator().manual_seed(1))
    compiled = compile_graph(prims.trace(torch.pow, x, y), (x, y))
    torch.testing.assert_close(compiled(x, y), torch.pow(x, y))


def _normalized_max_pool(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    y = torch.relu(x * scale + 1)
    return torch.ops.aten.max_pool2d_with_indices(y, [3, 3], [2, 2], [1, 1])[0]


@needs_compiler
def test_a_channels_last_max_pool_is_a_vectorized_loop(tmp_path: Path) -> None:
    """Each window element's bounds check is constant along the channels (the SIMD loop);
    as `if (in_bounds) { load }` GCC 12 vectorized no loop ("no vectype for .MASK_LOAD"), so
    ResNet's stem max pool ran scalar. The checks and offsets now come before the loop."""
    x = torch.randn(2, 16, 12, 12).contiguous(memory_format=torch.channels_last)
    scale = torch.rand(1, 16, 1, 1) + 0.5
    compiled = _compiled(_normalized_max_pool, x, scale)
    module = compiled.module  # type: ignore[attr-defined]
    # every kernel's loop (the pool's too: it was the one scalar loop of the two)
    assert vectorized_loops(module, tmp_path) >= module.count('extern "C"')
