"""The configuration space of the GEMM template: block sizes, warps, pipeline stages and the
group-M swizzle, pruned for the problem's shape.

`gemm_configs(m, n, k, dtype)` lists candidates best-first by a static guess (`[0]` is what
a launch without autotuning uses). Blocks never exceed the problem rounded up to a power of
two (a 64-row problem gets no 128-row tiles), and the list is deduplicated after that clamp.
With `tma=True` (operands a descriptor can read, `tma.py`) it adds the Hopper variants: TMA
loads, one tile per program or persistent (one program per SM walking the tiles). Under
`mode="max-autotune"` every candidate is compiled and timed on the real shapes, beside the
vendor library (see `gemm_choice.py`), so a candidate that cannot win costs a compile (1-3 s
of a worker) and a timing for nothing. Pruned by what the H100 runs measured
(docs/perf/templates.md, run 2: the best of all candidates on 13 shapes): tiles under
128x128 only where 128x128 tiles leave SMs idle (`WAVE_TILE_AREA`), TMA only over a K loop
of at least `TMA_MIN_K`, and only the two TMA shapes that ever won.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

# Every block size divides this, so the launch grid covers each tile (see gemm_writer).
GRID_UNIT = 256
# Programs of a persistent configuration: the H100 SXM's SMs (another GPU gets the same
# correct kernel, its tiles spread a little less evenly).
PERSISTENT_PROGRAMS = 132
# TMA variants only for results of at least this many elements: below, a tile per SM is
# already short of a wave and the extra compiles (each ~2 s) buy nothing.
TMA_MIN_OUTPUT = 1024 * 1024
# ... and only over at least this much K: with K = 768 (12 blocks of 64) the pointer kernel
# was the best of every candidate on the three products measured (GPT-2's qkv and MLP up, the
# latter with its bias + GELU epilogue fused); TMA won from K = 3072 up (run 2).
TMA_MIN_K = 1024
# Where 128x128 tiles alone give every SM a tile (PERSISTENT_PROGRAMS of them or more), the
# smaller tiles go: they read more operand bytes per FLOP and add parallelism the GPU does
# not lack. In run 2 a tile under 128x128 was the best only at 256^3, 512^3 and 1024^3
# (4-64 tiles of 128x128); on the 8 products with 192 or more, 128x128 or larger won.
WAVE_TILE_AREA = 128 * 128
# Split-K: a large-tile configuration that fills at most half the SMs also runs with its K
# loop split in 2-8 chunks (each at least SPLIT_MIN_K_BLOCKS blocks of K), so that a short
# grid with a long K keeps every SM busy.
SPLIT_TILE_AREA = 128 * 128
SPLIT_K_MAX = 8
SPLIT_MIN_K_BLOCKS = 4


@dataclass(frozen=True)
class GemmConfig:
    """One template configuration."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    tma: bool = False  # operand blocks by TMA descriptors (sm90)
    persistent: bool = False  # one program per SM, walking the tiles
    split_k: int = 1  # programs per tile, each summing a chunk of K (see gemm_writer)

    def launch(self, batch: int, m: int, n: int, numel: int) -> tuple[int, int, int]:
        """(XBLOCK, programs, iterations): the launcher's grid is `cdiv(numel, XBLOCK)`
        programs, each computing up to `iterations` tiles (`programs` apart)."""
        tiles = batch * -(-m // self.block_m) * -(-n // self.block_n)
        if self.split_k > 1:  # at least split_k programs a tile
            block = numel // (tiles * self.split_k)
            return block, -(-numel // block), 1
        if not self.persistent:
            block = self.block_m * self.block_n
            return block, -(-numel // block), 1
        wanted = min(PERSISTENT_PROGRAMS, tiles)
        block = -(-numel // wanted)
        programs = -(-numel // block)
        return block, programs, -(-tiles // programs)

    def as_json(self, batch: int, m: int, n: int, k: int, numel: int) -> dict[str, object]:
        block, programs, iterations = self.launch(batch, m, n, numel)
        k_blocks = -(-k // self.block_k)
        constants = {
            "XBLOCK": block,  # the launcher's grid block (see gemm_writer)
            "BLOCK_M": self.block_m,
            "BLOCK_N": self.block_n,
            "BLOCK_K": self.block_k,
            "GROUP_M": self.group_m,
            "UPCAST": 0,  # see gemm_writer.CONSTEXPRS
            "TMA": int(self.tma),
            "PROGRAMS": programs,
            "ITERATIONS": iterations,
            "SPLIT_K": self.split_k,
            "K_CHUNK": -(-k_blocks // self.split_k) * self.block_k,  # K of one split program
        }
        return {"constants": constants, "num_warps": self.num_warps, "num_stages": self.num_stages}


# (block_m, block_n, block_k, warps, stages) for 16-bit operands: the shapes Triton's and
# torch.compile's matmul tables find best on Hopper and Ampere, largest tiles first.
_HALF = (
    (128, 256, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 64, 4, 4),
    (128, 128, 32, 4, 4),
    (64, 64, 32, 4, 5),
    (32, 64, 32, 4, 5),
    (16, 64, 64, 4, 4),
    (16, 32, 64, 2, 5),
)
# TMA variants (16-bit operands on sm90): (block_m, block_n, block_k, warps, stages, persistent),
# Triton's persistent-TMA tutorial's best H100 shape, and a 96 KiB one of which two programs
# fit an SM (one's epilogue runs while the other's K loop does). The best of all candidates
# in run 2 on 4096^3, 8192^3 and Llama-7B's MLP products, and on GPT-2's MLP down product.
# Persistent 128x128 (8 warps, 4 stages) and one 128x256 tile a program (8 warps, 3 stages)
# were timed there too and never were.
_TMA = (
    (128, 256, 64, 8, 3, True),
    (128, 128, 64, 4, 3, False),
)
# float32 operands take twice the shared memory per element: half the K block.
_FLOAT = (
    (128, 128, 32, 8, 3),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (64, 64, 32, 4, 4),
    (32, 64, 32, 4, 4),
    (16, 32, 32, 2, 4),
)


def gemm_configs(
    m: int,
    n: int,
    k: int,
    dtype: torch.dtype,
    limit: int = 8,
    *,
    tma: bool = False,
    split: bool = False,
    batch: int = 1,
) -> list[GemmConfig]:
    """At most `limit` candidates for a `batch x m x n x k` product of `dtype` operands, then
    with `split` the split-K variants of large tiles that leave SMs idle, and with `tma` the
    TMA variants where the product fills the GPU (`[0]` is never one of those: the
    interpreter and GPUs before sm90 run the pointer kernel)."""
    table = _FLOAT if dtype == torch.float32 else _HALF
    found: list[GemmConfig] = []
    for block_m, block_n, block_k, warps, stages in table:
        config = _clamped(m, n, k, GemmConfig(block_m, block_n, block_k, warps, stages))
        if config not in found:
            found.append(config)
    # tiles that leave most SMs idle go last: prefer configs giving at least ~1 wave
    found.sort(key=lambda c: -_waves_score(m, n, c))
    found = found[:limit]
    if _large_tiles_fill_a_wave(m, n, batch):
        found = [c for c in found if c.block_m * c.block_n >= WAVE_TILE_AREA]
    if split:
        found += _split_configs(m, n, k, found, batch)
    if tma and dtype != torch.float32 and m * n >= TMA_MIN_OUTPUT and k >= TMA_MIN_K:
        for block_m, block_n, block_k, warps, stages, persistent in _TMA:
            config = GemmConfig(block_m, block_n, block_k, warps, stages, tma=True,
                                persistent=persistent)  # fmt: skip
            config = _clamped(m, n, k, config)
            if config not in found:
                found.append(config)
    return found


def _large_tiles_fill_a_wave(m: int, n: int, batch: int) -> bool:
    """Whether unclamped 128x128 tiles give every SM at least one (`WAVE_TILE_AREA`)."""
    if m < 128 or n < 128:
        return False
    return batch * -(-m // 128) * -(-n // 128) >= PERSISTENT_PROGRAMS


def _split_configs(
    m: int, n: int, k: int, found: list[GemmConfig], batch: int = 1
) -> list[GemmConfig]:
    """Split-K twins of the large tiles in `found` whose grid fills at most half the SMs."""
    split: list[GemmConfig] = []
    for config in found:
        if config.block_m * config.block_n < SPLIT_TILE_AREA:
            continue
        tiles = batch * _tiles(m, n, config)
        most = min(SPLIT_K_MAX, PERSISTENT_PROGRAMS // tiles,
                   -(-k // config.block_k) // SPLIT_MIN_K_BLOCKS)  # fmt: skip
        chunks = 1
        while chunks * 2 <= most:
            chunks *= 2
        if chunks > 1:
            split.append(replace(config, split_k=chunks))
    return split[:2]


def _clamped(m: int, n: int, k: int, config: GemmConfig) -> GemmConfig:
    """`config` with blocks no larger than the problem (rounded up to a power of two)."""
    block_m = min(config.block_m, _ceil_pow2(m, 16))
    block_n = min(config.block_n, _ceil_pow2(n, 16))
    warps = config.num_warps
    if block_m * block_n < 64 * 64:  # small tiles: fewer warps suffice
        warps = min(warps, 4)
    return replace(config, block_m=block_m, block_n=block_n,
                   block_k=min(config.block_k, _ceil_pow2(k, 16)), num_warps=warps)  # fmt: skip


def _tiles(m: int, n: int, config: GemmConfig) -> int:
    return -(-m // config.block_m) * -(-n // config.block_n)


def _waves_score(m: int, n: int, config: GemmConfig) -> float:
    """Prefer large tiles as long as they still give the GPU's ~132 SMs work."""
    tiles = _tiles(m, n, config)
    occupancy = min(tiles / 132, 1.0)
    return occupancy * 10 + config.block_m * config.block_n / 65536


def _ceil_pow2(value: int, floor: int) -> int:
    """`value` rounded up to a power of two, at least `floor`."""
    result = floor
    while result < value:
        result *= 2
    return result
