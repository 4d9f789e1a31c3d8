"""C++ kernels that read a transposed input: whole 16x16 tiles transpose their loads in
registers into a stack buffer (`ember_transpose_tile`), tiles cut by the tensor's edge load
directly. Both must give eager's values exactly (each element is the same expression of the
same inputs) at sizes that are not multiples of 16, through strided and permuted 3D views,
for every element width, and where a transposed load sits under a mask."""

from __future__ import annotations

import platform
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.codegen.cpp.compiler import COMPILER
from ember.inductor.codegen.cpp.tiling import TRANSPOSE_PRELUDE
from ember.inductor.pipeline import compile_graph

pytestmark = pytest.mark.skipif(shutil.which(COMPILER) is None, reason="no C++ compiler")


def _check(
    fn: Callable[..., torch.Tensor], *inputs: torch.Tensor, staged: bool | None = True
) -> str:
    """Compile `fn`, compare with eager bit for bit; the module's source. `staged`: whether
    some tile transposes in registers (None: either)."""
    compiled = compile_graph(prims.trace(fn, *inputs), inputs)
    torch.testing.assert_close(compiled(*inputs), fn(*inputs), rtol=0, atol=0, equal_nan=True)
    module: str = compiled.module
    if staged is not None:
        assert ("ember_transpose_tile(" in module) == staged, module
    return module


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


@pytest.mark.parametrize("shape", [(16, 16), (17, 33), (48, 31), (5, 200), (300, 257)])
def test_transposed_copy_at_odd_sizes(shape: tuple[int, int]) -> None:
    _check(lambda x: (x.t() * 2.0).contiguous(), _randn(*shape))


@pytest.mark.parametrize(
    "permutation", [(0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)], ids=lambda p: "".join(map(str, p))
)
def test_3d_permutes(permutation: tuple[int, int, int]) -> None:
    # (0, 2, 1) swaps the last two loops and is staged; the others move the stride-1
    # dimension further out
    x = _randn(3, 37, 45)
    _check(lambda t: (t.permute(*permutation) + 1.0).contiguous(), x, staged=None)


def test_strided_views() -> None:
    # a slice of every other column, transposed: the tile's rows are 2 elements apart
    # along the input's stride-1 dimension, so nothing is staged, and the values still hold
    x = _randn(70, 90)
    _check(lambda t: (t[:, ::2].t() * 3.0).contiguous(), x, staged=False)
    # a column slice of an input, transposed: rows of the tile start mid-row
    _check(lambda t: (t[5:61, 3:77].t() - 1.0).contiguous(), x)
    # a non-contiguous graph input (the transpose of a wider tensor's slice)
    y = _randn(40, 100)[:, 7:90]
    _check(lambda t: (t.t() * 0.5).contiguous(), y)


def test_transposed_plus_contiguous_operand() -> None:
    # one load staged, the other read along the store
    _check(lambda a, b: a.t() + b, _randn(45, 70), _randn(70, 45))


@pytest.mark.parametrize("dtype", [torch.int32, torch.float64, torch.int64, torch.uint8])
def test_element_widths(dtype: torch.dtype) -> None:
    x = (_randn(35, 50) * 100).to(dtype)
    _check(lambda t: (t.t() * 2).contiguous(), x)


def test_a_transposed_load_under_a_mask_is_not_staged() -> None:
    # the padded border reads nothing: its index would fall outside the input
    x = _randn(33, 40)
    _check(lambda t: F.pad(t.t(), (2, 3, 1, 4)) * 2.0, x, staged=False)


def test_bool_transpose() -> None:
    x = _randn(29, 47) > 0
    _check(lambda t: torch.logical_not(t.t()).contiguous(), x)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="builds x86-64 vector variants")
@pytest.mark.parametrize("target", ["-mavx512f", "-mavx2", "-mno-avx2"])
def test_every_transpose_path(target: str, tmp_path: Path) -> None:
    # the build machine picks one of the AVX-512, AVX2 and plain paths (-march=native);
    # each is checked here on 4-, 8- and 1-byte values, run only where the CPU has the
    # instructions
    flags = {"-mavx512f": "avx512f", "-mavx2": "avx2"}
    if target in flags and flags[target] not in Path("/proc/cpuinfo").read_text():
        pytest.skip(f"the CPU lacks {flags[target]}")
    program = tmp_path / "transpose.cpp"
    program.write_text(
        "#include <cstdint>\n#include <cstdio>\n"
        + TRANSPOSE_PRELUDE
        + """
template <typename T> int wrong() {
  T src[40 * 37], dst[256];
  for (int i = 0; i < 40 * 37; ++i) src[i] = static_cast<T>(i * 3 + 1);
  ember_transpose_tile(src + 3, 37, dst);
  int bad = 0;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) bad += dst[c * 16 + r] != src[3 + r * 37 + c];
  return bad;
}
int main() {
  printf("%d\\n", wrong<float>() + wrong<int32_t>() + wrong<double>() + wrong<uint8_t>());
}
"""
    )
    binary = tmp_path / "transpose"
    subprocess.run(
        [COMPILER, "-O2", "-std=c++17", target, str(program), "-o", str(binary)], check=True
    )
    assert subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout == "0\n"
