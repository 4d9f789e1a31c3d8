"""Triton tilings chosen from a kernel's loads: a row reduction that also reads one value per
row keeps whole-row tiles; a column reduction takes wide tiles along its outputs, persistent
or not."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ember import prims
from ember.inductor.codegen.triton.heuristics import (
    COLUMN_LOOP_STAGES,
    Tiling,
    choose_tiling,
    reduces,
)
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS
from ember.inductor.scheduler.fusion import Kernel, schedule
from ember.prims.decompositions import decompose


def _tilings(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> list[Tiling]:
    graph = decompose(prims.trace(fn, *inputs), DECOMPOSITIONS)
    program = lower_graph(graph)
    kernels = [k for k in schedule(program, "triton") if isinstance(k, Kernel)]
    return [choose_tiling(kernel, program) for kernel in kernels if reduces(kernel)]


def nll_log_softmax_backward(
    logits: torch.Tensor, high: torch.Tensor, total: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Cross-entropy's backward: a row sum beside per-row values (the log-softmax's maximum
    and log-sum, the target's gradient), which outnumber the loads of the matrix."""
    columns = torch.arange(logits.shape[1])
    grad = torch.where(columns == target[:, None], -high[:, None] * 2, 0.0)
    log_probs = logits - high[:, None] - torch.log(total[:, None])
    return grad - torch.exp(log_probs) * grad.sum(1, keepdim=True)


def test_per_row_values_do_not_make_a_row_reduction_a_column_one() -> None:
    rows, width = 64, 4096
    inputs = (
        torch.randn(rows, width),
        torch.randn(rows),
        torch.rand(rows) + 1,
        torch.randint(0, width, (rows,)),
    )
    (tiling,) = _tilings(nll_log_softmax_backward, *inputs)
    assert tiling.configs[0].xblock <= 2 and (tiling.configs[0].rblock or 0) >= 512, tiling


def test_column_reductions_tile_wide_along_their_outputs() -> None:
    (tiling,) = _tilings(lambda x: x.sum(0), torch.randn(3000, 256))
    assert tiling.configs[0].xblock >= 64, tiling


def test_short_column_reductions_spread_over_programs() -> None:
    """Rows that fit one tile: as many programs as about one a multiprocessor, each at least
    8 outputs wide (32 bytes of float32 partials a row). The second half of a split
    batch-norm statistic (256 channels over 64 partials) ran as 4 programs of [64, 64]."""
    for rows, outputs in ((40, 256), (64, 1024), (98, 8192)):
        (tiling,) = _tilings(lambda x: x.sum(0), torch.randn(rows, outputs))
        config = tiling.configs[0]
        assert tiling.persistent and config.xblock >= 8, (rows, outputs, tiling)
        assert outputs // config.xblock >= min(128, outputs // 8), (rows, outputs, tiling)


def test_a_small_column_reduction_loads_whole_rows_in_many_programs() -> None:
    """The second half of a split batch-norm sum: 64 channels over 896 partial sums. Looped,
    one program of 64 outputs stepped through 28 row blocks, waiting for memory each time
    (19 us on the H100); persistent, 8 programs load their rows at once."""
    for rows, outputs in ((896, 64), (512, 256)):
        (tiling,) = _tilings(lambda x: x.sum(0), torch.randn(rows, outputs))
        config = tiling.configs[0]
        assert tiling.persistent and (config.rblock or 0) >= rows, (rows, tiling)
        assert config.xblock >= 8 and outputs // config.xblock >= 8, (rows, tiling)


def test_a_large_column_reduction_is_persistent_only_over_rows_of_a_wide_tile() -> None:
    """The first half of a split batch-norm statistic: many partials of 64-128 rows each.
    Rows that fit a [64, 64] tile (64 outputs: 128 bytes of bf16 a row) are one tile; longer
    ones loop in [64, 8] tiles of 4 warps with r-blocks loaded ahead. As [32, 128] tiles, the
    98-112-row chunks of ResNet-50's statistics read 0.6-0.9 TB/s on the H100."""
    (tiling,) = _tilings(lambda x: x.sum(0), torch.randn(64, 32768))
    config = tiling.configs[0]
    assert tiling.persistent and (config.xblock, config.rblock) == (64, 64), tiling
    (tiling,) = _tilings(lambda x: x.sum(0), torch.randn(98, 16384))
    config = tiling.configs[0]
    assert not tiling.persistent and tiling.stages == COLUMN_LOOP_STAGES, tiling
    assert (config.xblock, config.rblock, config.num_warps) == (64, 8, 4), tiling
