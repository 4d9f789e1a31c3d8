"""A mixed-order reduction kernel (`scheduler/mixed_order_reductions.py`) in Triton.

Each program loops over its block of rows, `ROWS` rows a step in `[ROWS, RBLOCK]` tiles
that hold whole rows: the row kernel's members run on each tile as in a persistent kernel,
and each column sum adds the tile's values into a `[ROWS, RBLOCK]` float accumulator. After
the loop the accumulators are summed over their rows and stored as the program's row of
partial sums. The launch grid is one program per block of rows (XBLOCK is 1: the grid
block; the row step is a literal).
"""

from __future__ import annotations

import re

from ember.inductor.codegen.backend import KernelSource
from ember.inductor.codegen.triton.heuristics import Config, Tiling
from ember.inductor.codegen.triton.kernel import TritonKernelWriter
from ember.inductor.codegen.triton.ops import TRITON_TYPES, compute_type, reduction_identity
from ember.inductor.codegen.triton.size_variants import Specialization
from ember.inductor.ir.program import Program
from ember.inductor.scheduler.mixed_order_reductions import MixedOrderKernel

# points of one [ROWS, RBLOCK] tile. A program holds its column sums beside the row kernel's
# values: Llama's RMSNorm backward (rows of 1024, 8 warps) built for sm_90 took 144 registers
# a thread in [4, 1024] tiles (one program of 8 warps a multiprocessor), 95 in [2, 1024], 40
# in [1, 1024] (six programs); the row kernel alone took 80 in [4, 1024]
TILE_POINTS = 1024


def _pow2(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


class MixedOrderWriter(TritonKernelWriter):
    """Builds a `MixedOrderKernel`'s source: the row kernel's body in a loop over rows."""

    def __init__(
        self, kernel: MixedOrderKernel, program: Program, special: Specialization | None = None
    ) -> None:
        super().__init__(kernel, program, special)
        self.mixed = kernel
        rblock = _pow2(int(self.rnumel))
        self.rows = max(1, min(TILE_POINTS // rblock, _pow2(kernel.rows_per_program)))
        while kernel.rows_per_program % self.rows:
            self.rows //= 2
        warps = 8 if self.rows * rblock >= 1024 else 4
        self.tiling = Tiling(True, [Config(1, rblock, warps)])

    def generate(self) -> KernelSource:
        source = super().generate()
        source.grid = [str(self.mixed.programs)]
        return source

    def _specialized_bodies(self) -> list[str]:
        return []  # the scheduler combines only kernels of static sizes

    def _body(self) -> list[str]:
        kernel = self.mixed
        self.lines = []
        self.depth = 1
        per_program = kernel.rows_per_program
        self.line(f"xnumel = {self.index(self.xnumel)}")
        self.line(f"rnumel = {self.index(self.rnumel)}")
        rbase = "tl.arange(0, RBLOCK)[None, :]"
        self.line(f"rbase = {rbase}.to(tl.int64)" if self.wide else f"rbase = {rbase}")
        self.line("rindex = rbase")
        self.line("rmask = rindex < rnumel")
        self._split("rindex", "r", kernel.inner)
        program_id = "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"
        self.line(f"xprogram = {program_id}")
        self.line(f"xstart = xprogram * {per_program}")
        columns = [m for m in kernel.members if m.level == "column"]
        accumulators = []
        for member in columns:
            accumulator = self.fresh("colacc")
            kind = compute_type(member.body.dtype)
            self.line(f"{accumulator} = tl.zeros([XBLOCK, RBLOCK], {kind})")
            accumulators.append(accumulator)
        with self.block(f"for xstep in range(0, {per_program}, XBLOCK):"):
            self.line("xindex = xstart + xstep + tl.arange(0, XBLOCK)[:, None]")
            self.line(f"xmask = xindex < xstart + {per_program}")
            self.line("xrmask = xmask & rmask")
            self._split("xindex", "x", kernel.outer)
            self._members([m for m in kernel.members if m.level != "column"])
            self.context.reduction = True
            try:
                for member, accumulator in zip(columns, accumulators):
                    value = self.value(member.body, {})
                    identity = reduction_identity("sum", member.body.dtype)
                    self.line(
                        f"{accumulator} = {accumulator} + tl.where(xrmask, {value}, {identity})"
                    )
            finally:
                self.context.reduction = False
        for member, accumulator in zip(columns, accumulators):
            total = self.fresh("colsum")
            self.line(f"{total} = tl.sum({accumulator}, 0)[None, :]")
            storage = member.node.storage
            self.storages[storage] = None
            self.written[storage] = None
            dtype = TRITON_TYPES[self.program.storages[storage].dtype]
            # the program's row of partial sums ([programs, features], contiguous)
            index = f"xprogram * {self.index(self.rnumel)} + r0"
            self.line(f"tl.store(p_{storage} + ({index}), {total}.to({dtype}), rmask)")
        # the row step is a literal; XBLOCK stays the grid block (1)
        return [re.sub(r"\bXBLOCK\b", str(self.rows), line) for line in self.lines]
