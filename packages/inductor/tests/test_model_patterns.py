"""Index patterns of real models that once compiled to wrong addresses or sizes, each checked
against eager with the C++ generator and with the Triton generator under Triton's interpreter
(the pipeline's `check_bounds` pass proves every kernel's indices inside their buffers on
the way): Swin's shifted windows (rolled, cropped, residual-added), LayoutLM's box
embeddings (strided slices of one int64 input as embedding indices) and pooling windows of
a padded input (EfficientNet's 1280-wide average pool asked for a 250 GiB buffer)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.ir.bounds import storage_extent
from ember.inductor.ir.program import LoopNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("pattern-cache")))


def _randn(*size: int) -> torch.Tensor:
    return torch.randn(*size, generator=torch.Generator().manual_seed(0))


def shifted_window_reverse(windows: torch.Tensor, shortcut: torch.Tensor) -> torch.Tensor:
    """Swin's block tail: windows back to a padded 8x8 map, rolled back by the shift,
    cropped to 7x7, added to the residual."""
    channels = windows.shape[-1]
    x = windows.view(-1, 2, 2, 4, 4, channels).permute(0, 1, 3, 2, 4, 5)
    x = x.contiguous().view(-1, 8, 8, channels)
    x = torch.roll(x, shifts=(2, 2), dims=(1, 2))
    x = x[:, :7, :7, :].contiguous()
    return shortcut + x.view(x.shape[0], 49, channels)


def shifted_window_partition(x: torch.Tensor) -> torch.Tensor:
    """Swin's block head: pad 7x7 to 8x8, roll by minus the shift, cut into 4x4 windows."""
    x = F.pad(x, (0, 0, 0, 1, 0, 1))
    x = torch.roll(x, shifts=(-2, -2), dims=(1, 2))
    batch, height, width, channels = x.shape
    x = x.view(batch, height // 4, 4, width // 4, 4, channels).permute(0, 1, 3, 2, 4, 5)
    return x.contiguous().view(-1, 16, channels) * 2


def box_embeddings(
    boxes: torch.Tensor, x_table: torch.Tensor, y_table: torch.Tensor, h_table: torch.Tensor
) -> torch.Tensor:
    """LayoutLM's 2-d position embeddings: each box coordinate (a stride-4 slice of one int64
    tensor) and the box height index their tables."""
    left = F.embedding(boxes[:, :, 0], x_table)
    upper = F.embedding(boxes[:, :, 1], y_table)
    right = F.embedding(boxes[:, :, 2], x_table)
    height = F.embedding(boxes[:, :, 3] - boxes[:, :, 1], h_table)
    return left + upper + right + height


def _boxes() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 30, (2, 5), generator=g)
    y0 = torch.randint(0, 30, (2, 5), generator=g)
    width = torch.randint(0, 30, (2, 5), generator=g)
    return torch.stack([x0, y0, x0 + width, y0 + width], -1)


CASES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "swin_shifted_window_reverse": (
        shifted_window_reverse,
        lambda: (_randn(8, 4, 4, 3), _randn(2, 49, 3)),
    ),
    "swin_shifted_window_partition": (shifted_window_partition, lambda: (_randn(2, 7, 7, 3),)),
    "layoutlm_box_embeddings": (
        box_embeddings,
        lambda: (_boxes(), _randn(64, 6), _randn(64, 6), _randn(64, 6)),
    ),
    "pooling_windows": (
        lambda x: (
            F.avg_pool2d(x, 40, ceil_mode=True),
            F.avg_pool2d(x, 3, 2, 1),
            F.max_pool2d(x, 3, 2, 1),
        ),
        lambda: (_randn(2, 5, 7, 7),),
    ),
}


def _check(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], compiled: Any) -> None:
    expected = fn(*inputs)
    actual = compiled(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpp_kernels_match_eager(name: str, cache: ArtifactCache) -> None:
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    _check(fn, inputs, compile_graph(prims.trace(fn, *inputs), inputs, backend=CppBackend(),
                                     cache=cache))  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpreted_triton_kernels_match_eager(
    name: str, cache: ArtifactCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("triton")
    from ember.inductor.codegen.triton import TritonBackend

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    graph = prims.trace(fn, *inputs)
    _check(fn, inputs, compile_graph(graph, inputs, backend=TritonBackend(), cache=cache))


def test_pooling_windows_are_read_without_materializing_the_padded_input() -> None:
    """Windows are strided views of the padded input: read as an index function, not a copy of
    it (EfficientNet on an H100: a (32, 1280, 1280, 1280) padded copy, 250 GiB); and an average
    window wider than the padded input reads only the input (what lies beyond is padding the
    average does not count)."""
    x = _randn(2, 5, 7, 7)

    def pools(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            F.max_pool2d(x, 3, 2, 1),
            F.avg_pool2d(x, 3, 2, 1),
            F.avg_pool2d(x, 64, ceil_mode=True),
        )

    program = lower_graph(decompose(prims.trace(pools, x), DECOMPOSITIONS))
    largest = max(e for s in program.storages.values() if (e := storage_extent(s)) is not None)
    assert largest <= x.numel()  # no buffer holds the padded input (2 * 5 * 9 * 9 elements)
    widest = max(
        int(torch.tensor([int(r) for r in node.reduction_ranges]).prod())
        for node in program.nodes
        if isinstance(node, LoopNode) and node.reduction_ranges
    )
    assert widest <= 9 * 9  # not 64 * 64 window elements per output
