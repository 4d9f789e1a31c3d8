"""Pointwise kernels over a transpose in `[YBLOCK, XBLOCK]` tiles (Triton).

A flat pointwise kernel walks its outer loops in one order, so when a load is contiguous
along one loop and a store along another (a weight cast into a transposed or channels-last
layout) one of them is scattered. `transposed_tiles` finds the clean case: every access linear
in the loops, each stride-1 along one of exactly two loops, and each varying along both.
`TransposedTileWriter` then runs one tile over those two loops a program; Triton lays each
load and store out along its own stride-1 loop and moves the tile through shared memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ember.inductor.codegen.backend import KernelSource
from ember.inductor.codegen.triton.heuristics import Config, Tiling, reduces
from ember.inductor.codegen.triton.kernel import TritonKernelWriter
from ember.inductor.ir import body
from ember.inductor.ir.indexing import Expr, index_var
from ember.inductor.ir.program import Program
from ember.inductor.scheduler.fusion import Kernel

# points of one tile: [64, 16] over a 3x3 convolution weight's 9 taps, [4, 256] over an
# image's 3 channels, [32, 32] over two long loops (a float32 row of 128 bytes loaded, a
# bf16 one of 64 stored)
TILE_POINTS = 1024
# ops whose values are not a plain function of the tile's loads (their own index or shape)
_UNTILED_OPS = frozenset({"index_expr", "random", "masked"})


@dataclass(frozen=True)
class TransposedTiles:
    """The two loops (positions in `kernel.outer`) a tile spans, rows then columns, its
    sides, and its warps."""

    rows: int
    columns: int
    yblock: int
    xblock: int
    warps: int

    def programs(self, sizes: tuple[int, ...]) -> int:
        """Programs in the launch grid: every other loop's points times the tiles."""
        count = 1
        for position, size in enumerate(sizes):
            if position == self.rows:
                count *= -(-size // self.yblock)
            elif position == self.columns:
                count *= -(-size // self.xblock)
            else:
                count *= size
        return count


def transposed_tiles(kernel: Kernel) -> TransposedTiles | None:
    """The tiles for a pointwise kernel whose accesses disagree on their stride-1 loop;
    None (the flat kernel) for anything that is not a clean two-way split."""
    if reduces(kernel) or len(kernel.outer) < 2:
        return None
    if any(sympy.sympify(size).free_symbols for size in kernel.outer):
        return None
    sizes = tuple(int(size) for size in kernel.outer)
    loops = [index_var("x", k) for k in range(len(sizes))]
    indices: list[Expr] = []
    for member in kernel.members:
        if member.level != "outer" or member.store_indirect or member.store_mode is not None:
            return None
        for value in body.walk(member.body):
            if value.op in _UNTILED_OPS:
                return None
        for load in member.loads():
            storage, index, indirect = load.args
            if indirect:
                return None
            if str(storage) not in kernel.local_buffers:
                indices.append(sympy.sympify(index))
        if member.node.storage not in kernel.local_buffers:
            indices.append(sympy.sympify(member.store_index))
    contiguous: set[int] = set()
    strides: list[list[int]] = []
    for index in indices:
        found = _strides(index, loops)
        if found is None or 1 not in found:
            return None
        strides.append(found)
        contiguous.add(found.index(1))
    if len(contiguous) != 2:
        return None
    rows, columns = sorted(contiguous)
    if any(found[rows] == 0 or found[columns] == 0 for found in strides):
        return None  # a broadcast along a tile side: the flat kernel reads it as well
    if min(sizes[rows], sizes[columns]) < 2:
        return None
    yblock, xblock = _sides(sizes[rows], sizes[columns])
    warps = max(1, min(8, yblock * xblock // 256))
    return TransposedTiles(rows, columns, yblock, xblock, warps)


def _strides(index: Expr, loops: list[sympy.Symbol]) -> list[int] | None:
    """Each loop's integer coefficient in a linear index (None: not linear in the loops)."""
    expanded = sympy.expand(index)
    coefficients: list[int] = []
    rest = expanded
    for loop in loops:
        coefficient = expanded.coeff(loop)
        if not coefficient.is_Integer:
            return None
        coefficients.append(int(coefficient))
        rest = rest - coefficient * loop
    if sympy.expand(rest).free_symbols & set(loops):
        return None  # a loop under `//`, `%` or a product
    return coefficients


def _sides(rows: int, columns: int) -> tuple[int, int]:
    """[YBLOCK, XBLOCK]: each side the next power of two of its loop, the longer one halved
    until the tile holds at most `TILE_POINTS` (a short loop leaves the other side longer)."""
    yblock = min(TILE_POINTS, 1 << max(0, (rows - 1).bit_length()))
    xblock = min(TILE_POINTS, 1 << max(0, (columns - 1).bit_length()))
    while yblock * xblock > TILE_POINTS:
        if yblock >= xblock:
            yblock //= 2
        else:
            xblock //= 2
    return yblock, xblock


class TransposedTileWriter(TritonKernelWriter):
    """A pointwise kernel's source over `[YBLOCK, XBLOCK]` tiles: the program id picks the
    other loops' point and the tile; `xmask` is the tile's mask over both sides."""

    def __init__(self, kernel: Kernel, program: Program, tiles: TransposedTiles) -> None:
        super().__init__(kernel, program)
        self.tiles = tiles
        self.sizes_static = tuple(int(size) for size in kernel.outer)
        # XBLOCK is the grid block: one program a tile (the sides are literals)
        self.tiling = Tiling(False, [Config(1, None, tiles.warps)])

    def generate(self) -> KernelSource:
        source = super().generate()
        source.grid = [str(self.tiles.programs(self.sizes_static))]
        return source

    def _specialized_bodies(self) -> list[str]:
        return []  # static sizes only

    def _body(self) -> list[str]:
        tiles, sizes = self.tiles, self.sizes_static
        self.lines = []
        self.depth = 1
        kind = self._index_type()
        program_id = "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"
        self.line(f"xprogram = {program_id}")
        # the columns' tile varies fastest, then the rows' tile, then the other loops
        column_tiles = -(-sizes[tiles.columns] // tiles.xblock)
        row_tiles = -(-sizes[tiles.rows] // tiles.yblock)
        self.line(f"xtile = xprogram % {column_tiles}")
        self.line(f"ytile = (xprogram // {column_tiles}) % {row_tiles}")
        self.line(f"xrest = xprogram // {column_tiles * row_tiles}")
        others = [k for k in range(len(sizes)) if k not in (tiles.rows, tiles.columns)]
        inner = 1
        for position in reversed(others):
            value = "xrest" if inner == 1 else f"(xrest // {inner})"
            if position != others[0]:
                value = f"({value} % {sizes[position]})"
            self.line(f"{index_var('x', position)} = {value}")
            inner *= sizes[position]
        rows, columns = index_var("x", tiles.rows), index_var("x", tiles.columns)
        lanes = "tl.arange(0, {})"
        row_lanes, column_lanes = lanes.format(tiles.yblock), lanes.format(tiles.xblock)
        if self.wide:
            row_lanes, column_lanes = f"{row_lanes}.to({kind})", f"{column_lanes}.to({kind})"
        self.line(f"{rows} = ytile * {tiles.yblock} + {row_lanes}[:, None]")
        self.line(f"{columns} = xtile * {tiles.xblock} + {column_lanes}[None, :]")
        self.line(f"xmask = ({rows} < {sizes[tiles.rows]}) & ({columns} < {sizes[tiles.columns]})")
        self._members(self.kernel.members)
        for store in self.deferred or ():
            self.line(store)
        return self.lines
