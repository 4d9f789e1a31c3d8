"""Pointwise kernels over a transpose in 2D tiles (`codegen/triton/transposed_tiles.py`):
which kernels take tiles, their values under the Triton interpreter against eager and against
the flat kernel (the same roundings), and the tiled kernels built for sm_90."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.codegen.triton import backend as triton_backend
from ember.inductor.codegen.triton.transposed_tiles import TransposedTiles, transposed_tiles
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph, generate
from ember.inductor.scheduler.fusion import Kernel
from ember.runtime import ArtifactCache

pytest.importorskip("triton")

BF16 = torch.bfloat16


def transposing_cast(x: torch.Tensor) -> torch.Tensor:
    """A float32 [M, N] matrix cast to bf16 and laid out as [N, M] (a transposed weight)."""
    return x.to(BF16).t().contiguous()


def channels_last_weight(w: torch.Tensor) -> torch.Tensor:
    """A 3x3 convolution weight cast to bf16 in channels-last layout ([O, I, 9] -> [O, 9, I])."""
    return w.to(BF16).contiguous(memory_format=torch.channels_last)


def fused_over_transpose(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pointwise ops reading one operand transposed and one as it lies, into bf16."""
    return (torch.relu(a.t() * b + 1.5) * b).to(BF16).contiguous()


def batched_transpose(x: torch.Tensor) -> torch.Tensor:
    """A transpose of the last two dims of a 3D tensor (the batch from the program id)."""
    return (x.transpose(1, 2) * 2).contiguous()


def broadcast_over_transpose(a: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A bias broadcast along one side of the tile: the flat kernel."""
    return (a.t() + bias[:, None]).contiguous()


def _randn(*shape: int) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: (torch.randn(*shape, generator=torch.Generator().manual_seed(0)),)


def _two(first: tuple[int, ...], second: tuple[int, ...]) -> Callable[[], tuple[torch.Tensor, ...]]:
    def make() -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(1)
        return torch.randn(*first, generator=generator), torch.randn(*second, generator=generator)

    return make


Case = tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]
# sizes that are not multiples of the tile sides (131 x 77, 37 x 29 channels, 9 taps)
CASES: dict[str, Case] = {
    "cast_131x77": (transposing_cast, _randn(131, 77)),
    "cast_64x256": (transposing_cast, _randn(64, 256)),
    "channels_last_37x29": (channels_last_weight, _randn(37, 29, 3, 3)),
    "fused_77x131": (fused_over_transpose, _two((77, 131), (131, 77))),
    "batched_3x45x70": (batched_transpose, _randn(3, 45, 70)),
}
FLAT: dict[str, Case] = {
    "broadcast_bias": (broadcast_over_transpose, _two((77, 131), (131,))),
    "contiguous_cast": (lambda x: x.to(BF16), _randn(131, 77)),
}


def _tilings(
    fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], monkeypatch: pytest.MonkeyPatch
) -> list[TransposedTiles | None]:
    """What `transposed_tiles` answered for each pointwise or reduction kernel of the Graph
    generated for CUDA (its decisions, recorded as the backend asks)."""
    answers: list[TransposedTiles | None] = []

    def recorded(kernel: Kernel) -> TransposedTiles | None:
        answers.append(transposed_tiles(kernel))
        return answers[-1]

    monkeypatch.setattr(triton_backend, "transposed_tiles", recorded)
    graph = prims.trace(fn, *inputs)
    generate(graph, triton_backend.TritonBackend(), InductorConfig(), torch.device("cuda"))
    return answers


@pytest.mark.parametrize("name", sorted(CASES))
def test_transposes_take_tiles(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fn, make_inputs = CASES[name]
    tiled = _tilings(fn, make_inputs(), monkeypatch)
    assert len(tiled) == 1 and tiled[0] is not None
    assert tiled[0].yblock * tiled[0].xblock <= 1024


@pytest.mark.parametrize("name", sorted(FLAT))
def test_broadcasts_and_plain_casts_stay_flat(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fn, make_inputs = FLAT[name]
    tiled = _tilings(fn, make_inputs(), monkeypatch)
    assert tiled and all(answer is None for answer in tiled)


def _run(
    fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], cache: Path
) -> list[torch.Tensor]:
    graph = prims.trace(fn, *inputs)
    compiled = compile_graph(
        graph, inputs, backend=triton_backend.TritonBackend(), cache=ArtifactCache(cache)
    )
    result = compiled(*inputs)
    return list(result) if isinstance(result, (tuple, list)) else [result]


@pytest.mark.parametrize("name", sorted(CASES) + sorted(FLAT))
def test_tiled_values_equal_eager_and_the_flat_kernel(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    fn, make_inputs = {**CASES, **FLAT}[name]
    inputs = make_inputs()
    got = _run(fn, inputs, tmp_path / "tiled")
    expected = fn(*inputs)
    assert got[0].shape == expected.shape and got[0].stride() == expected.stride()
    # the interpreter rounds to bf16 by truncation (eager to nearest): one bf16 ulp
    torch.testing.assert_close(got[0], expected, rtol=1.6e-2, atol=1e-5)
    # the flat kernel computes the same values the same way: they must agree exactly
    monkeypatch.setattr(triton_backend, "transposed_tiles", lambda kernel: None)
    flat = _run(fn, inputs, tmp_path / "flat")
    assert torch.equal(got[0], flat[0])


def test_transposed_tiles_build_for_sm90(build_for_sm90: Any) -> None:
    report = build_for_sm90(__file__, sorted(CASES))
    for name in CASES:
        assert report[name] and all(kernel["ptx"] for kernel in report[name]), name
        assert any(".target sm_90" in text for k in report[name] for text in k["ptx"]), name
