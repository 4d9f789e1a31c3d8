"""Kernels too small for threads are plain SIMD loops, and what they compute stays eager's.

GCC 12 did not vectorize a `parallel for simd` loop whose `if` clause was a constant false:
every 1-D pointwise kernel below the thread threshold ran scalar, and its transcendental
calls went to scalar libm (a GELU's `erff`). Vectorization is checked on the built library:
a loop GCC vectorized with a math call calls that function's vector variant (`_ZGV...`:
glibc's libmvec, or the clones of ember's own `omp declare simd` exp), a scalar loop only the
scalar one.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import sympy
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.codegen.cpp.compiler import (
    COMPILER,
    vector_math_flags,
)
from ember.inductor.codegen.cpp.parallel_regions import PARALLEL_THRESHOLD, thread_clause
from ember.inductor.pipeline import compile_graph

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from cpp_build import (  # noqa: E402
    called_functions,
    disassembly,
)

needs_libmvec = pytest.mark.skipif(
    shutil.which(COMPILER) is None
    or shutil.which("objdump") is None
    or platform.machine() != "x86_64"
    or not vector_math_flags(),
    reason="needs g++, objdump and glibc's vector math library on x86-64",
)


def _vector_calls(module: str, directory: Path) -> set[str]:
    """The vector variants (`_ZGV...`) of math functions the built library calls, from
    libmvec (`_ZGVeN16v_erff`) or its own (`_ZGVdN8v__Z9ember_expf`): each ends in
    `_<scalar name>`."""
    called = {name.split("@")[0] for name in called_functions(disassembly(module, directory))}
    return {name for name in called if name.startswith("_ZGV")}


def test_a_known_size_decides_threads_without_a_runtime_clause() -> None:
    assert thread_clause(sympy.Integer(PARALLEL_THRESHOLD - 1), "32767L") is None
    assert thread_clause(sympy.Integer(PARALLEL_THRESHOLD), "32768L") == ""
    size = sympy.Symbol("s0", integer=True, positive=True) * 64
    # the run-time condition is on the threads only: a plain `if` of a `parallel for simd`
    # also turns the SIMD lanes off when false (a symbolic GELU of 8192 values ran scalar)
    assert thread_clause(size, "64L*s0") == f" if(parallel: 64L*s0 >= {PARALLEL_THRESHOLD}L)"


SMALL_ACTIVATIONS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "gelu": (F.gelu, "erff"),
    "tanh": (torch.tanh, "tanhf"),
    "silu": (F.silu, "expf"),
}


@needs_libmvec
@pytest.mark.parametrize("name", sorted(SMALL_ACTIVATIONS))
def test_a_small_activation_calls_the_vector_variant(name: str, tmp_path: Path) -> None:
    # 32x256 values, below the thread threshold: mlp's hidden activations (the bias + GELU
    # kernel took 139 us a call with scalar erff, 11 us vectorized, one core)
    fn, function = SMALL_ACTIVATIONS[name]
    x = torch.randn(32, 256, generator=torch.Generator().manual_seed(0))
    # eager's GELU of +inf is NaN (its vectorized erf), the formula's inf: left out
    x[0, :4] = torch.tensor([float("nan"), 30.0, -30.0, 0.0])
    compiled = compile_graph(prims.trace(fn, x), (x,))
    torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)
    called = _vector_calls(compiled.module, tmp_path)
    assert any(symbol.endswith(f"_{function}") for symbol in called), called


@needs_libmvec
def test_a_small_gelu_backward_calls_vector_erf_and_exp(tmp_path: Path) -> None:
    # the backward of a linear + GELU recomputes erf and adds exp's Gaussian term
    x = torch.randn(32, 256, generator=torch.Generator().manual_seed(1), requires_grad=True)
    grad = torch.randn(32, 256, generator=torch.Generator().manual_seed(2))

    def backward(t: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.gelu_backward(g, t)

    compiled = compile_graph(prims.trace(backward, x.detach(), grad), (x.detach(), grad))
    (expected,) = torch.autograd.grad(F.gelu(x), x, grad)
    torch.testing.assert_close(compiled(x.detach(), grad), expected)
    called = _vector_calls(compiled.module, tmp_path)
    assert {"erff", "expf"} <= {s.rsplit("_", 1)[-1] for s in called}, called


@pytest.mark.parametrize("shape", [(4, 2, 64, 64), (33, 7), (40000,)])
def test_dropout_in_small_and_large_kernels_keeps_or_scales_each_value(
    shape: tuple[int, ...],
) -> None:
    # a kept value is x / (1 - p), a dropped one 0; about 1 - p of them are kept
    x = torch.rand(shape, generator=torch.Generator().manual_seed(0)) + 0.5

    def fn(t: torch.Tensor) -> torch.Tensor:
        return F.dropout(t, 0.25, training=True)

    compiled = compile_graph(prims.trace(fn, x), (x,))
    torch.manual_seed(0)
    y = compiled(x)
    assert isinstance(y, torch.Tensor)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / 0.75)
    assert abs(kept.float().mean().item() - 0.75) < 4 * (0.75 * 0.25 / x.numel()) ** 0.5 + 0.01


@pytest.mark.skipif(
    shutil.which(COMPILER) is None
    or shutil.which("objdump") is None
    or platform.machine() != "x86_64",
    reason="reads x86-64 machine code with objdump",
)
def test_a_dropout_mask_in_a_loop_nest_is_a_vectorized_loop(tmp_path: Path) -> None:
    # attention's dropout in BERT's backward: a mask `(u < 0.9)` of Philox bits, as a float,
    # inside the SIMD loop of a 2-D kernel; its bool-to-float cast (a `static_cast`) kept
    # GCC 12 from vectorizing the loop ("no vectype"), so every draw ran scalar
    scores = torch.randn(8, 64, 64, generator=torch.Generator().manual_seed(0))

    def fn(t: torch.Tensor) -> torch.Tensor:
        return F.dropout(torch.softmax(t, dim=-1), 0.1, training=True).transpose(1, 2) * 2.0

    compiled = compile_graph(prims.trace(fn, scores), (scores,))
    torch.manual_seed(0)
    y = compiled(scores)
    assert isinstance(y, torch.Tensor)
    expected = torch.softmax(scores, dim=-1).transpose(1, 2) * 2.0 / 0.9
    kept = y != 0
    torch.testing.assert_close(y[kept], expected[kept])
    listing = disassembly(compiled.module, tmp_path)  # type: ignore[attr-defined]
    # Philox's 32x32->64-bit products: packed when the loop is vectorized, `imul` when not
    packed = [line for line in listing if "\tvpmuludq" in line or "\tvpmullq" in line]
    assert packed


_COUNTING_HARNESS = r"""
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <vector>
static int regions = 0;
extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned threads, unsigned flags) {
  ++regions;  // then libgomp's own
  auto real = reinterpret_cast<void (*)(void (*)(void*), void*, unsigned, unsigned)>(
      dlvsym(dlopen("libgomp.so.1", RTLD_NOW), "GOMP_parallel", "GOMP_4.0"));
  real(fn, data, threads, flags);
}
int main(int argc, char** argv) {
  void* library = dlopen(argv[1], RTLD_NOW);
  auto kernel = reinterpret_cast<void (*)(void*, void*, int64_t)>(dlsym(library, argv[2]));
  for (int64_t rows : {4L, 4096L}) {
    std::vector<float> x(rows * 64, 1.0f), y(rows * 64);
    regions = 0;
    kernel(x.data(), y.data(), rows);
    std::printf("%ld %d %g\n", rows, regions, y[rows * 64 - 1]);
  }
}
"""


@pytest.mark.skipif(
    shutil.which(COMPILER) is None or platform.system() != "Linux", reason="needs g++ on Linux"
)
def test_a_small_symbolic_call_opens_no_parallel_region(tmp_path: Path) -> None:
    # a false `if(parallel: ...)` still called libgomp: TinyDecoder's symbolic Graph paid a
    # GOMP_parallel call in each of its kernels at 4x4 tokens, where the static Graph's small
    # kernels open none. Counted by a harness whose own GOMP_parallel the kernels bind to.
    from ember.inductor.codegen.cpp.compiler import compile_shared_library

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x) * 2

    x = torch.randn(8, 64)
    tracer = prims.Tracer(prims.symbolic.ShapeEnv())
    traced = tracer.add_input(x, "x", dynamic_dims=(0,))
    tracer.set_inputs_signature(prims.tree_flatten((x,))[1], [prims.Ref(traced.value_name)])
    with tracer.active():
        out = fn(traced)
    compiled = compile_graph(tracer.finish(out), (x,))
    for rows in (4, 4096):  # below and above the thread threshold: the same values
        x = torch.randn(rows, 64)
        torch.testing.assert_close(compiled(x), fn(x))
    (name,) = [
        line.split("(")[0].split()[-1]
        for line in compiled.module.splitlines()
        if line.startswith('extern "C" void ')
    ]
    (tmp_path / "module.so").write_bytes(compile_shared_library(compiled.module))
    (tmp_path / "harness.cpp").write_text(_COUNTING_HARNESS)
    harness = tmp_path / "harness"
    command = [COMPILER, "-O1", "-rdynamic", str(tmp_path / "harness.cpp"), "-o", str(harness)]
    subprocess.run([*command, "-ldl"], check=True, capture_output=True)
    lines = subprocess.run(
        [str(harness), str(tmp_path / "module.so"), name],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    ).stdout.split("\n")
    counts = {int(line.split()[0]): int(line.split()[1]) for line in lines if line}
    gelu = float(F.gelu(torch.tensor(1.0)) * 2)
    assert all(abs(float(line.split()[2]) - gelu) < 1e-5 for line in lines if line)
    assert counts == {4: 0, 4096: 1}
