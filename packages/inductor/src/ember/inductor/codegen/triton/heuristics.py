"""Block sizes, warps and stages for a Triton kernel, chosen from its shapes.

Pointwise kernels take 1024-point blocks (fewer for small tensors). A reduction whose rows fit
one tile (at most `PERSISTENT_LIMIT` points) is *persistent*: RBLOCK covers the row and XBLOCK
rows share a program. Longer rows loop over RBLOCK-wide chunks; a reduction that reads memory
contiguously along the kept dimension (a column sum) takes wide XBLOCK and narrow RBLOCK
instead, and is persistent only over rows that fit a [64, RBLOCK] tile (`WIDE_COLUMN_ROWS`),
or when it is small (the second half of a split reduction: `COLUMN_PERSISTENT_LIMIT` rows,
`_small_column`); its r-loop is software pipelined (`COLUMN_LOOP_STAGES`). `configs[0]` is
the default; the rest are what `max-autotune` benchmarks. Symbolic sizes are planned with
`SIZE_HINT`, except a symbolic reduction length whose range the Graph bounds (`size_ranges`:
attention over a length that slices a 256-row causal mask): a bound that fits one tile makes
the kernel persistent over tiles of the bound, masked to the length at run time. Planned as
8192, a softmax over 16x12 heads of 256 keys looped one row a program (49 152 programs of
256 elements: 0.53 ms a layer on the H100, 25 times a static kernel's time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from ember.inductor.ir.indexing import Expr, index_var, largest, product
from ember.inductor.ir.load_direction import load_directions
from ember.inductor.ir.program import Program
from ember.inductor.scheduler.fusion import Kernel

PERSISTENT_LIMIT = 1024
# rows a persistent tile of a small column reduction (`SMALL_COLUMN_ELEMENTS`: a split's
# second half) covers: [32, 128] tiles, spread over more programs (`_short_columns`)
COLUMN_PERSISTENT_LIMIT = 128
# rows a persistent tile of a large column reduction covers: [64, 64] tiles, 64 outputs (a
# 128-byte line of bf16) a row. Longer rows loop in [64, 8] tiles. Over [32, 128] tiles (64
# bytes a row, 8 warps, three reductions across them for a variance) the first halves of
# ResNet-50's split batch-norm statistics over 98-112-row chunks ran at 0.6-0.9 TB/s on the
# H100 (1024 channels over 32 x 14 x 14: 16.2 us a call), where the looped [64, 8] ones over
# 196-392-row chunks ran at 1.65-1.8 TB/s and torch.compile's, [64, 8]-style loops over
# 128-row chunks, at 0.9-1.4 TB/s (docs/perf/gpu-kernels.md, session 11)
WIDE_COLUMN_ROWS = 64
SMALL_COLUMN_ELEMENTS = 1 << 20  # a column reduction this small loads whole rows at once
SHORT_COLUMN_PROGRAMS = 128  # programs a column reduction over short rows aims for at least
# r-blocks a looped column reduction keeps in flight (Triton copies them into shared memory
# ahead of use). Loaded one at a time, a program waited for each block: ResNet-50's batch-norm
# statistics (a split Welford over 392-row chunks of [64, 32] bf16 tiles, 4 programs of 64
# registers a thread on each multiprocessor: 16 KB in flight) ran at 1.2 TB/s on the H100,
# 42 us for a 51 MB map, torch.compile's at 1.75 TB/s. Three stages: 40 KB in flight.
COLUMN_LOOP_STAGES = 3
COLUMN_SHORT_LOOP = 512  # rows a looped column reduction takes in [64, 8] tiles, at most
# shared memory the blocks loaded ahead may take a program (fewer stages past it): a kernel
# of many float32 maps would not fit a multiprocessor's 227 KB at three stages, and would
# fail to launch
STAGE_BYTES = 64 * 1024
SIZE_HINT = 8192


@dataclass(frozen=True)
class Config:
    """One launch configuration: constexpr block sizes, warps and software-pipeline stages."""

    xblock: int
    rblock: int | None = None
    num_warps: int = 4
    num_stages: int = 1

    def as_json(self) -> dict[str, object]:
        constants = {"XBLOCK": self.xblock}
        if self.rblock is not None:
            constants["RBLOCK"] = self.rblock
        return {"constants": constants, "num_warps": self.num_warps, "num_stages": self.num_stages}


@dataclass
class Tiling:
    """Persistent or looped, the launch configurations, and how many r-blocks a looped
    kernel's loops load ahead (`stages`; 1: each block when it is used)."""

    persistent: bool
    configs: list[Config] = field(default_factory=list)
    stages: int = 1


def reduces(kernel: Kernel) -> bool:
    """Whether the kernel works on [XBLOCK, RBLOCK] tiles (a reduction over no loops, whose
    ranges were all 1, still reduces a tile of one)."""
    return bool(kernel.inner) or any(m.level == "reduction" for m in kernel.members)


def choose_tiling(kernel: Kernel, program: Program) -> Tiling:
    xnumel = _hint(product(kernel.outer))
    if not reduces(kernel):
        return Tiling(False, _pointwise(xnumel))
    rnumel_expr = product(kernel.inner)
    rnumel = _hint(rnumel_expr)
    column = _column_reduction(kernel)
    bound = _bound(rnumel_expr, program)
    limit = PERSISTENT_LIMIT
    if column:
        # a persistent column tile is XBLOCK outputs wide: under 64 its loads use part of each
        # memory transaction, so a large column reduction loops unless its rows fit a
        # [64, RBLOCK] tile; a small one (few programs) takes narrower tiles over longer rows
        large = bound is None or xnumel * bound > SMALL_COLUMN_ELEMENTS
        limit = WIDE_COLUMN_ROWS if large else COLUMN_PERSISTENT_LIMIT
    if bound is not None and bound <= limit:
        return Tiling(True, _short_columns(xnumel, bound) if column else _persistent(xnumel, bound))
    if column and _small_column(xnumel, rnumel_expr):
        return Tiling(True, _persistent_column(xnumel, rnumel))
    configs = _looped(xnumel, rnumel, column)
    return Tiling(False, configs, _loop_stages(kernel, program, configs) if column else 1)


def _pointwise(xnumel: int) -> list[Config]:
    block = min(1024, _pow2(xnumel))
    default = Config(block, None, _warps(block, 8))
    candidates = [Config(b, None, w) for b, w in ((256, 4), (512, 4), (1024, 4), (2048, 8))]
    return _unique([default, *(c for c in candidates if c.xblock <= max(block, 256))])


def _persistent(xnumel: int, rnumel: int) -> list[Config]:
    rblock = _pow2(rnumel)
    xblock = max(1, min(_pow2(xnumel), 4096 // rblock, 64))
    default = Config(xblock, rblock, _warps(xblock * rblock, 8))
    candidates = [
        Config(x, rblock, w)
        for x in (1, 2, 4, 8, 16)
        for w in (_warps(x * rblock, 4), _warps(x * rblock, 8))
        if x <= max(xblock, 1) * 4 and x * rblock <= 16384
    ]
    return _unique([default, *candidates])


def _short_columns(xnumel: int, rnumel: int) -> list[Config]:
    """Column rows that fit one tile: tiles of at most 4096 points, XBLOCK halved (to 8)
    until about one program a multiprocessor runs (`SHORT_COLUMN_PROGRAMS`). The second half
    of a split batch-norm statistic, 256 channels over 64 partials (three arrays, a float64
    merge), ran as 4 programs of [64, 64] tiles, 11 times a ResNet-50 step."""
    rblock = _pow2(rnumel)
    xblock = max(1, min(64, 4096 // rblock, _pow2(xnumel)))
    while xblock > 8 and -(-xnumel // xblock) < SHORT_COLUMN_PROGRAMS:
        xblock //= 2
    default = Config(xblock, rblock, _warps(xblock * rblock, 8))
    return _unique([default, *_persistent(xnumel, rnumel)])


def _small_column(xnumel: int, rnumel: Expr) -> bool:
    """A column reduction small enough to load at once: rows that fit one tile and at most
    `SMALL_COLUMN_ELEMENTS` elements. Looped, its few programs (one per 64 outputs) waited
    for memory once per 32 rows: the second half of a split batch-norm sum, 64 channels over
    896 partial sums, was one program of 28 steps (19 us on the H100; 105 such kernels in a
    ResNet-50 training step took 0.8 ms)."""
    if rnumel.free_symbols:
        return False
    return int(rnumel) <= PERSISTENT_LIMIT and xnumel * int(rnumel) <= SMALL_COLUMN_ELEMENTS


def _persistent_column(xnumel: int, rnumel: int) -> list[Config]:
    """[XBLOCK, RBLOCK] tiles over whole rows: at least 8 outputs a program (32 bytes of
    float32 partial sums along the outputs), more programs rather than wider tiles."""
    rblock = _pow2(rnumel)
    xblock = max(1, min(64, max(8, _pow2(xnumel) // 32), 8192 // rblock))
    default = Config(xblock, rblock, _warps(xblock * rblock, 8))
    candidates = [Config(x, rblock, 8) for x in (4, 8, 16) if x * rblock <= 16384]
    return _unique([default, *candidates])


def _looped(xnumel: int, rnumel: int, column: bool) -> list[Config]:
    if column:
        # Over a split's chunks (a few hundred rows), [64, 8] with 4 warps and the r-blocks
        # loaded ahead: the fastest of benchmarks.column_reductions' sweep on the H100 for
        # every batch-norm statistic and sum it timed (1.11-1.37x the [64, 32] tile with 8
        # warps; docs/perf/gpu-kernels.md). Longer loops keep [64, 32]: each lane's float32
        # chain of rnumel / RBLOCK additions stays as short as before.
        short = Config(64, 8, 4)
        default = short if rnumel <= COLUMN_SHORT_LOOP else Config(64, 32, 8)
        candidates = [short, Config(64, 32, 8), Config(32, 64, 8), Config(128, 16, 8)]
    else:
        xblock = 1 if xnumel >= 256 or rnumel >= 8192 else 2
        default = Config(xblock, 1024 if rnumel >= 2048 else 512, 8)
        candidates = [Config(1, 2048, 8), Config(1, 512, 4), Config(4, 256, 4), Config(8, 128, 4)]
    return _unique([default, *candidates])


def _loop_stages(kernel: Kernel, program: Program, configs: list[Config]) -> int:
    """`COLUMN_LOOP_STAGES`, fewer where the r-blocks loaded ahead of the default tile
    would take more than `STAGE_BYTES` of shared memory (1: none ahead). The candidates of
    `max-autotune` tile at most twice the default: under 227 KB still. A kernel that loads
    what it stores loads as before: a block loaded ahead would pass the barrier that orders
    an earlier loop's stores before a later loop's loads."""
    written = {member.node.storage for member in kernel.members} - set(kernel.local_buffers)
    reduced = {index_var("r", k) for k in range(len(kernel.inner))}
    outputs = {index_var("x", k) for k in range(len(kernel.outer))}
    block = configs[0].rblock or 1
    tile = configs[0].xblock * block
    per_stage = 0
    seen: set[tuple[str, str]] = set()
    for member in kernel.members:
        for load in member.loads():
            storage, index = str(load.args[0]), sympy.sympify(load.args[1])
            if (storage, str(index)) in seen or not index.free_symbols & reduced:
                continue  # loaded once per program, not per r-block
            if storage in written:
                return 1
            seen.add((storage, str(index)))
            points = tile if index.free_symbols & outputs else block
            per_stage += points * program.storages[storage].dtype.itemsize
    stages = min(COLUMN_LOOP_STAGES, STAGE_BYTES // max(per_stage, 1))
    return stages if stages >= 2 else 1


def _column_reduction(kernel: Kernel) -> bool:
    """Whether the kernel's loads walk memory along the kept (x) dimension, not along r.
    Only loads that vary along both count: a value per row (a log-softmax's maximum, a
    target) read beside a row-major matrix made BERT's loss backward a column reduction,
    128 programs looping over 30522 columns each (2.1 ms on the H100, torch.compile 0.41)."""
    if not kernel.outer:
        return False
    outer = [index_var("x", k) for k in range(len(kernel.outer))]
    inner = [index_var("r", k) for k in range(len(kernel.inner))]
    along_x, along_r = load_directions((m.body for m in kernel.members), outer, inner)
    return along_x > along_r


def _bound(rnumel: Expr, program: Program) -> int | None:
    """The reduction length's largest value: itself when static, else its largest under the
    Graph's size ranges (None when unbounded)."""
    rnumel = sympy.sympify(rnumel)
    if not rnumel.free_symbols:
        return max(1, int(rnumel))
    found = largest(rnumel, program.size_ranges)
    return None if found is None else max(1, found)


def _hint(expr: Expr) -> int:
    expr = sympy.sympify(expr)
    if expr.free_symbols:
        expr = expr.xreplace({s: SIZE_HINT for s in expr.free_symbols})
    return max(1, int(expr))


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _warps(elements: int, most: int) -> int:
    """About 8 elements a thread, 1 to `most` warps (a power of two)."""
    return max(1, min(most, _pow2(max(1, elements // 256))))


def _unique(configs: list[Config]) -> list[Config]:
    return list(dict.fromkeys(configs))
