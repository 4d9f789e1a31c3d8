"""The C++ generator implements every op of the loop-level IR."""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from ember.inductor.codegen.cpp.compiler import compile_shared_library
from ember.inductor.codegen.cpp.ops import OPS, PRELUDE, RANDOM
from ember.inductor.ir.ops import BINARY_OPS, RANDOM_KINDS, UNARY_OPS


def test_every_math_op_has_a_cpp_spelling() -> None:
    assert set(UNARY_OPS) | set(BINARY_OPS) == set(OPS)


def test_every_kind_of_random_number_has_a_cpp_spelling() -> None:
    assert set(RANDOM_KINDS) == set(RANDOM)


def test_philox_matches_the_published_known_answer(tmp_path: Path) -> None:
    # Random123's kat_vectors: philox4x32, 10 rounds, counter 0 and key 0
    source = PRELUDE + (
        'extern "C" void draw(void* out) { ember_philox(0, 0, static_cast<uint32_t*>(out)); }\n'
    )
    library_path = tmp_path / "philox.so"
    library_path.write_bytes(compile_shared_library(source))
    library = ctypes.CDLL(str(library_path))
    words = (ctypes.c_uint32 * 4)()
    library.draw(words)
    assert [f"{w:08x}" for w in words] == ["6627e8d5", "e169c58d", "bc57ac4c", "9b00dbd8"]


def test_max_and_min_propagate_nan_from_either_operand(tmp_path: Path) -> None:
    # `ember_max`/`ember_min` are selects (a vectorizable loop, as a pooling window's chain
    # is); eager's maximum/minimum: NaN if either is, the other value otherwise
    source = PRELUDE + (
        'extern "C" void extremes(const float* a, const float* b, float* hi, float* lo) {\n'
        "  #pragma omp simd\n"
        "  for (int i = 0; i < 8; ++i) {\n"
        "    hi[i] = ember_max<float>(a[i], b[i]);\n"
        "    lo[i] = ember_min<float>(a[i], b[i]);\n"
        "  }\n"
        "}\n"
    )
    library_path = tmp_path / "extremes.so"
    library_path.write_bytes(compile_shared_library(source))
    library = ctypes.CDLL(str(library_path))
    nan, inf = float("nan"), float("inf")
    a = torch.tensor([nan, 1.0, nan, -inf, 2.0, -3.0, inf, 0.5])
    b = torch.tensor([1.0, nan, nan, nan, -2.0, 5.0, -inf, 0.5])
    hi, lo = torch.empty(8), torch.empty(8)
    library.extremes(*(ctypes.c_void_p(t.data_ptr()) for t in (a, b, hi, lo)))
    torch.testing.assert_close(hi, torch.maximum(a, b), equal_nan=True)
    torch.testing.assert_close(lo, torch.minimum(a, b), equal_nan=True)
