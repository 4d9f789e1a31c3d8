"""The configuration space of the GEMM template: block sizes, warps, pipeline stages and the
group-M swizzle, pruned for the problem's shape.

`gemm_configs(m, n, k, dtype)` lists candidates best-first by a static guess (`[0]` is what
a launch without autotuning uses). Blocks never exceed the problem rounded up to a power of
two (a 64-row problem gets no 128-row tiles), and the list is deduplicated after that clamp.
Under `mode="max-autotune"` every candidate is compiled and timed on the real shapes, beside
the vendor library (see `gemm_choice.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Every block size divides this, so the launch grid covers each tile (see gemm_writer).
GRID_UNIT = 256


@dataclass(frozen=True)
class GemmConfig:
    """One template configuration."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8

    def as_json(self) -> dict[str, object]:
        constants = {
            "XBLOCK": self.block_m * self.block_n,  # the launcher's grid block (see gemm_writer)
            "BLOCK_M": self.block_m,
            "BLOCK_N": self.block_n,
            "BLOCK_K": self.block_k,
            "GROUP_M": self.group_m,
            "UPCAST": 0,  # see gemm_writer.CONSTEXPRS
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
# float32 operands take twice the shared memory per element: half the K block.
_FLOAT = (
    (128, 128, 32, 8, 3),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (64, 64, 32, 4, 4),
    (32, 64, 32, 4, 4),
    (16, 32, 32, 2, 4),
)


def gemm_configs(m: int, n: int, k: int, dtype: torch.dtype, limit: int = 8) -> list[GemmConfig]:
    """At most `limit` candidates for an `m x n x k` product of `dtype` operands."""
    table = _FLOAT if dtype == torch.float32 else _HALF
    found: list[GemmConfig] = []
    for block_m, block_n, block_k, warps, stages in table:
        config = GemmConfig(
            min(block_m, _ceil_pow2(m, 16)),
            min(block_n, _ceil_pow2(n, 16)),
            min(block_k, _ceil_pow2(k, 16)),
            warps,
            stages,
        )
        if config.block_m * config.block_n < 64 * 64:  # small tiles: fewer warps suffice
            config = GemmConfig(config.block_m, config.block_n, config.block_k,
                                min(warps, 4), stages)  # fmt: skip
        if config not in found:
            found.append(config)
    # tiles that leave most SMs idle go last: prefer configs giving at least ~1 wave
    found.sort(key=lambda c: -_waves_score(m, n, c))
    return found[:limit]


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
