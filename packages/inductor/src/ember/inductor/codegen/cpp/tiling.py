"""Tiles for pointwise kernels that read a transposed input.

`x.t().contiguous()` stores along the last loop and reads along the one before it: run as
rows, every vector of stores reads one float from each of 16 lines, and a row of 2048
touches 2048 lines before any is reused. Cutting the last two loops into `TILE` x `TILE`
tiles keeps the lines a tile reads in cache until the tile has used them all.

Inside a whole tile each transposed load is staged: its 16 source lines are loaded as
vectors, transposed in registers (`ember_transpose_tile`, AVX-512 or AVX2 shuffles) into a
tile-sized buffer on the stack, and the tile's body then reads that buffer along the same
loop it stores along, so both its loads and its stores are contiguous vectors (scalar
gathers inside the tile were 1.4x behind torch.compile's transposes). A tile cut by the edge
of the tensor runs the same body with direct loads. Values are unchanged: each element is
still computed once, by the same expression, from the same input values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

from ember.inductor.codegen.cpp.parallel_regions import thread_clause
from ember.inductor.codegen.cpp.printer import cpp_index
from ember.inductor.ir import body
from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.indexing import Expr, index_var

if TYPE_CHECKING:
    from ember.inductor.codegen.cpp.kernel import CppKernel

# Tile edge in elements: 16 float32 are one AVX-512 register and one 64-byte line.
TILE = 16

# `dst[c * 16 + r] = src[r * ld + c]` for a 16x16 tile; 4-byte values move through vector
# registers (the bits are only shuffled, so int32 tiles go the float path too).
TRANSPOSE_PRELUDE = r"""
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
template <typename T> static inline void ember_transpose_tile(const T* src, int64_t ld, T* dst) {
#if defined(__AVX512F__)
  if constexpr (sizeof(T) == 4) {
    const float* s = reinterpret_cast<const float*>(src);
    float* d = reinterpret_cast<float*>(dst);
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(s + i * ld);
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; ++g) {  // r[4g + k]: rows 4g..4g+3 of columns k, k+4, k+8, k+12
      __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
      __m512d c = _mm512_castps_pd(t[4 * g + 2]), e = _mm512_castps_pd(t[4 * g + 3]);
      r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
      r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
    }
    for (int k = 0; k < 4; ++k) {  // t[k]: columns k, k+8 of rows 0-7 (128-bit lanes)
      t[k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
      t[4 + k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
      t[8 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
      t[12 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
    }
    for (int k = 0; k < 4; ++k) {
      _mm512_storeu_ps(d + 16 * k, _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88));
      _mm512_storeu_ps(d + 16 * (k + 8), _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd));
      _mm512_storeu_ps(d + 16 * (k + 4), _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0x88));
      _mm512_storeu_ps(d + 16 * (k + 12), _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0xdd));
    }
    return;
  }
#elif defined(__AVX2__)
  if constexpr (sizeof(T) == 4) {
    const float* s = reinterpret_cast<const float*>(src);
    float* d = reinterpret_cast<float*>(dst);
    for (int row = 0; row < 16; row += 8)
      for (int column = 0; column < 16; column += 8) {
        __m256 r[8], t[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + (row + i) * ld + column);
        for (int i = 0; i < 4; ++i) {
          t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
          t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        for (int g = 0; g < 2; ++g) {  // r[4g + k]: rows 4g..4g+3 of columns k, k+4
          r[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
          r[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
          r[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
          r[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
        }
        for (int k = 0; k < 4; ++k) {
          float* out = d + (column + k) * 16 + row;
          _mm256_storeu_ps(out, _mm256_permute2f128_ps(r[k], r[4 + k], 0x20));
          _mm256_storeu_ps(out + 4 * 16, _mm256_permute2f128_ps(r[k], r[4 + k], 0x31));
        }
      }
    return;
  }
#endif
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) dst[c * 16 + r] = src[r * ld + c];
}
"""


def transposed_tile(cpp: CppKernel) -> int | None:
    """`TILE` if the pointwise kernel reads some input contiguously along its next-to-last
    loop and strided along its last (a transposed read), else None."""
    kernel = cpp.kernel
    if kernel.inner or len(kernel.outer) < 2:
        return None
    if any(m.store_mode or m.store_indirect for m in kernel.members):
        return None
    last = index_var("x", len(kernel.outer) - 1)
    before = index_var("x", len(kernel.outer) - 2)
    for member in kernel.members:
        for load in member.loads():
            storage, index, indirect = load.args
            # a buffer the kernel computes and keeps in a variable is no memory it reads
            # (a max pool's select chain, its links NCHW buffers in a channels-last kernel)
            if indirect or str(storage) in kernel.local_buffers:
                continue
            assert isinstance(index, sympy.Expr)
            if sympy.diff(index, before) == 1 and sympy.diff(index, last) not in (0, 1):
                return TILE
    return None


def _unconditional_loads(root: BodyValue) -> list[BodyValue]:
    """The loads a body always runs: not those under a `masked` value (their index may be
    out of bounds where the mask is false), though a mask's own loads are."""
    found: dict[int, BodyValue] = {}
    stack = [root]
    seen: set[int] = set()
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if value.op == "load":
            found[id(value)] = value
        if value.op == "masked":
            mask = value.args[0]
            assert isinstance(mask, BodyValue)
            stack.append(mask)
            continue
        stack.extend(value.children())
    conditional = {id(v) for v in body.walk(root) if v.op == "load"} - set(found)
    # a load shared by a masked subtree and an unconditional one still runs unconditionally
    return [v for key, v in found.items() if key not in conditional]


def staged_loads(cpp: CppKernel) -> dict[tuple[str, str], tuple[str, sympy.Expr, Expr]]:
    """The transposed loads a whole tile can stage, keyed (storage, index), with their
    storage, index and stride along the last loop: unconditional, direct, affine in the last
    two loops (1 along the next-to-last), from a storage the kernel does not store to."""
    kernel = cpp.kernel
    last = index_var("x", len(kernel.outer) - 1)
    before = index_var("x", len(kernel.outer) - 2)
    stored = {m.node.storage for m in kernel.members} | set(kernel.local_buffers)
    staged: dict[tuple[str, str], tuple[str, sympy.Expr, Expr]] = {}
    for member in kernel.members:
        for load in _unconditional_loads(member.body):
            storage, index, indirect = load.args
            if indirect or str(storage) in stored:
                continue
            assert isinstance(index, sympy.Expr)
            stride = sympy.diff(index, last)
            if sympy.diff(index, before) != 1 or stride in (0, 1):
                continue
            if stride.free_symbols & {last, before}:
                continue
            staged[(str(storage), str(index))] = (str(storage), index, stride)
    return staged


def generate_tiled(cpp: CppKernel, outer_vars: list[sympy.Symbol], numel: Expr, tile: int) -> None:
    """The whole kernel: threads over the outer loops and the tiles; in a whole tile the
    staged loads are transposed into stack buffers and the body runs in SIMD rows over them;
    a tile at the tensor's edge runs the body with direct loads."""
    kernel = cpp.kernel
    clause = thread_clause(numel, cpp.size(numel))
    if clause is not None:
        cpp.line(f"#pragma omp parallel for collapse({len(kernel.outer)}){clause}")
    for variable, bound in zip(outer_vars[:-2], kernel.outer[:-2]):
        cpp.line(f"for (int64_t {variable} = 0; {variable} < {cpp.size(bound)}; ++{variable})")
    tiled = list(zip(outer_vars[-2:], kernel.outer[-2:]))
    for variable, bound in tiled:
        start = f"{variable}_tile"
        cpp.line(f"for (int64_t {start} = 0; {start} < {cpp.size(bound)}; {start} += {tile}L)")
    staged = staged_loads(cpp)
    if not staged:
        _tile_loops(cpp, tiled, tile, whole=False)
        return
    whole = " && ".join(f"{v}_tile + {tile}L <= {cpp.size(b)}" for v, b in tiled)
    (row, _), (column, _) = tiled
    with cpp.block(f"if ({whole})"):
        origin = {v: sympy.Symbol(f"{v}_tile", integer=True) for v, _ in tiled}
        for position, (key, (storage, index, stride)) in enumerate(staged.items()):
            buffer = f"stage{position}"
            cpp.storages[storage] = None
            cpp.index(index)  # its size symbols become kernel arguments
            start = cpp_index(index.xreplace(origin))
            cpp.line(f"alignas(64) {cpp._pointee(storage)} {buffer}[{tile * tile}];")
            cpp.line(f"ember_transpose_tile({storage} + {start}, {cpp.size(stride)}, {buffer});")
            cpp.staged[key] = f"{buffer}[{tile}L*({row} - {row}_tile) + ({column} - {column}_tile)]"
        _tile_loops(cpp, tiled, tile, whole=True)
        cpp.staged.clear()
    with cpp.block("else"):
        _tile_loops(cpp, tiled, tile, whole=False)


def _tile_loops(
    cpp: CppKernel, tiled: list[tuple[sympy.Symbol, Expr]], tile: int, whole: bool
) -> None:
    """The loops over one tile (SIMD over its row) around every member's store."""
    for position, (variable, bound) in enumerate(tiled):
        start = f"{variable}_tile"
        end = f"{start} + {tile}L"
        if not whole:
            end = f"std::min<int64_t>({end}, {cpp.size(bound)})"
        if position == 1:
            cpp.line("#pragma omp simd")
        cpp.line(f"for (int64_t {variable} = {start}; {variable} < {end}; ++{variable})")
    with cpp.block(""):
        cpp._members(parallel_outer=True)
