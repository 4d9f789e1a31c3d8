"""Looped column reductions on Triton (heuristics' `COLUMN_LOOP_STAGES`): the r-loop loads
its next blocks ahead (`tl.range(..., num_stages=...)`, copied through shared memory on
sm_90), and its values stay eager's. Under the interpreter against eager; built for sm_90,
where the pipelined loads are asynchronous copies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.codegen.triton.heuristics import (
    COLUMN_LOOP_STAGES,
    COLUMN_SHORT_LOOP,
    choose_tiling,
    reduces,
)
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.inductor.scheduler.fusion import Kernel, schedule
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache

pytest.importorskip("triton")


def column_statistics(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A column sum and variance over 2048 rows: looped (too long for one tile), unsplit
    (too few elements to split)."""
    return x.sum(0), x.var(0)


def batch_norm_sums(
    dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch-norm backward's two sums over a channels-last map, in float32."""
    grad = dy.float()
    return grad.sum((0, 2, 3)), (grad * (x.float() - mean[:, None, None])).sum((0, 2, 3))


def _rows() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(2049, 64, generator=generator) * 3 + 5,)  # a ragged last r-block


def _maps() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)

    def feature_map() -> torch.Tensor:
        x = torch.randn(4, 64, 32, 17, generator=generator).to(torch.bfloat16)
        return x.contiguous(memory_format=torch.channels_last)

    return feature_map(), feature_map(), torch.randn(64, generator=generator)


def batch_norm_relu_step(
    x: torch.Tensor,
    dy: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """A training batch norm with ReLU over a bf16 channels-last map, forward (running
    statistics updated) and backward, in float32 as ResNet-50's under autocast."""
    xf = x.float()
    out, mean, invstd, new_mean, new_var = torch.ops.aten._native_batch_norm_legit_functional(
        xf, weight, bias, running_mean, running_var, True, 0.1, 1e-5
    )
    relu = out.relu()
    grad = torch.where(relu > 0, dy.float(), 0.0)
    dx, dw, db = torch.ops.aten.native_batch_norm_backward(
        grad, xf, weight, running_mean, running_var, mean, invstd, True, 1e-5, [True, True, True]
    )
    return relu.to(torch.bfloat16), new_mean, new_var, dx.to(torch.bfloat16), dw, db


def _batch_norm_inputs(batch: int = 4) -> tuple[torch.Tensor, ...]:
    """76 channels (a ragged second block of 64) over batch x 30 x 30 rows: at batch 4 split
    into 40 chunks of 90 rows (a ragged last r-block of 8), at 32 into 320."""
    generator = torch.Generator().manual_seed(0)

    def feature_map() -> torch.Tensor:
        x = torch.randn(batch, 76, 30, 30, generator=generator) * 2 + 3
        return x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)

    def vector() -> torch.Tensor:
        return torch.randn(76, generator=generator)

    return feature_map(), feature_map(), vector() + 2, vector(), vector(), vector().abs() + 0.5


Case = tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]
CASES: dict[str, Case] = {
    "column_statistics": (column_statistics, _rows),
    "batch_norm_sums": (batch_norm_sums, _maps),
    # built for sm_90 only: its first halves loop over 90-row chunks at the default sizes
    "batch_norm_relu_step": (batch_norm_relu_step, lambda: _batch_norm_inputs(32)),
}
INTERPRETED = ("batch_norm_sums", "column_statistics")  # looped whole, fast to interpret


def _stages(fn: Any, inputs: tuple[torch.Tensor, ...]) -> list[int]:
    from ember.inductor.codegen.triton import TritonBackend

    graph = decompose(prims.trace(fn, *inputs), DECOMPOSITIONS)
    program = lower_graph(graph, TritonBackend().dtypes)  # bf16 loads cast in the kernel
    kernels = [k for k in schedule(program, "triton") if isinstance(k, Kernel) and reduces(k)]
    return [choose_tiling(kernel, program).stages for kernel in kernels]


@pytest.mark.parametrize("name", INTERPRETED)
def test_looped_column_reductions_load_ahead(name: str) -> None:
    fn, make_inputs = CASES[name]
    assert set(_stages(fn, make_inputs())) == {COLUMN_LOOP_STAGES}


def _tiles(fn: Any, inputs: tuple[torch.Tensor, ...]) -> list[tuple[int, int, int]]:
    from ember.inductor.codegen.triton import TritonBackend

    graph = decompose(prims.trace(fn, *inputs), DECOMPOSITIONS)
    program = lower_graph(graph, TritonBackend().dtypes)
    kernels = [k for k in schedule(program, "triton") if isinstance(k, Kernel) and reduces(k)]
    tilings = [choose_tiling(kernel, program) for kernel in kernels]
    return [
        (t.configs[0].xblock, t.configs[0].rblock or 0, t.configs[0].num_warps) for t in tilings
    ]


def test_short_column_loops_take_narrow_tiles_and_long_ones_keep_theirs() -> None:
    """A looped column reduction over at most COLUMN_SHORT_LOOP rows (a split's chunk of a
    batch-norm map) runs [64, 8] tiles of 4 warps, the H100 sweep's best; a longer loop keeps
    [64, 32] of 8 (each lane's float32 chain no longer than before)."""
    generator = torch.Generator().manual_seed(0)
    short = torch.randn(COLUMN_SHORT_LOOP - 100, 4096, generator=generator)
    assert _tiles(lambda x: x.sum(0), (short,)) == [(64, 8, 4)]
    assert _tiles(lambda x: x.sum(0), _rows()) == [(64, 32, 8)]


def test_row_reductions_keep_one_stage() -> None:
    """Row reductions (another tiling, not measured with stages) load as before."""
    (x,) = _rows()
    assert _stages(lambda a: a.sum(1), (x.t().contiguous(),)) == [1]


def test_many_maps_load_fewer_blocks_ahead() -> None:
    """Blocks loaded ahead take shared memory: 4 float32 maps ([64, 32] tiles, 32 KB a
    stage) two stages, 12 maps none ahead (they would not fit a multiprocessor at three)."""

    def column_sum(*maps: torch.Tensor) -> torch.Tensor:
        total = maps[0]
        for other in maps[1:]:
            total = total + other
        return total.sum(0)

    generator = torch.Generator().manual_seed(0)
    for count, stages in ((4, 2), (12, 1)):
        maps = tuple(torch.randn(2049, 64, generator=generator) for _ in range(count))
        assert _stages(column_sum, maps) == [stages], count


@pytest.mark.parametrize("name", INTERPRETED)
def test_pipelined_column_reductions_equal_eager(name: str, interpreted_case: Any) -> None:
    fn, make_inputs = CASES[name]
    outputs, inputs = interpreted_case(fn, make_inputs)
    expected = fn(*inputs)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        torch.testing.assert_close(got, want, rtol=2e-5, atol=1e-4)


def test_pipelined_column_reductions_build_for_sm90(build_for_sm90: Any) -> None:
    """On sm_90 the loads ahead are asynchronous copies into shared memory."""
    report = build_for_sm90(__file__, sorted(CASES))
    for name in CASES:
        ptx = [text for kernel in report[name] for text in kernel["ptx"]]
        assert any("cp.async" in text for text in ptx), name


@pytest.mark.slow
def test_batch_norm_over_short_chunks_loops_and_equals_eager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first halves of a split batch-norm statistic and sums over 90-row chunks, looped
    in [64, 8] tiles (heuristics' `WIDE_COLUMN_ROWS`; ResNet-50's 98-112-row chunks), equal
    eager: outputs, running statistics and gradients. The chunks are large column reductions
    here at a sixth of the smallest that ResNet-50 loops, 256 channels over 6272 rows
    (`SMALL_COLUMN_ELEMENTS` lowered for this test: the interpreter takes three minutes at
    batch 32); the second halves stay one tile."""
    from ember.inductor.codegen.triton import TritonBackend, heuristics

    monkeypatch.setattr(heuristics, "SMALL_COLUMN_ELEMENTS", 1 << 14)
    inputs = _batch_norm_inputs()
    graph = decompose(prims.trace(batch_norm_relu_step, *inputs), DECOMPOSITIONS)
    program = lower_graph(
        graph, TritonBackend().dtypes, split_reductions=True, welford_reductions=True
    )
    kernels = [k for k in schedule(program, "triton") if isinstance(k, Kernel) and reduces(k)]
    tiles = [
        (t.persistent, t.configs[0].xblock, t.configs[0].rblock)
        for t in (choose_tiling(kernel, program) for kernel in kernels)
    ]
    assert tiles.count((False, 64, 8)) == 2, tiles  # the statistics' and the sums' first halves
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    graph = prims.trace(batch_norm_relu_step, *inputs)
    compiled = compile_graph(graph, inputs, backend=TritonBackend(), cache=ArtifactCache(tmp_path))
    names = ("output", "running mean", "running variance", "input gradient", "weight gradient")
    for name, got, expected in zip(
        (*names, "bias gradient"), compiled(*inputs), batch_norm_relu_step(*inputs)
    ):
        scale = float(expected.float().abs().max())
        tolerance = 1e-2 * scale if got.dtype == torch.bfloat16 else 2e-6 * scale
        torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=tolerance, msg=name)
