"""gather of a lazy value computes the gathered elements where they are read (nll_loss of a
log-softmax: the log-probabilities are never stored), unless it reads more elements than the
value has or the value uses the gathered position as a number; values equal eager's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.ir.indexing import product
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache

ROWS, VOCAB = 6, 50


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("gather-cache")))


def nll_of_log_softmax(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.nll_loss(torch.log_softmax(x, -1), target)


def gather_of_positions(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    positions = torch.arange(VOCAB, dtype=x.dtype).expand(ROWS, VOCAB)
    return (x * 2 + positions).gather(1, target[:, None])


def gather_repeated(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return (x * 2).gather(0, index)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS, VOCAB, generator=generator)
    return x, torch.randint(0, VOCAB, (ROWS,), generator=generator)


def _wide_buffers(fn: Callable[..., Any], *inputs: torch.Tensor) -> int:
    program = lower_graph(decompose(prims.trace(fn, *inputs), DECOMPOSITIONS))
    return sum(
        1
        for storage in program.storages.values()
        if storage.layout is not None and int(product(storage.layout.size)) == ROWS * VOCAB
    )


def _check(fn: Callable[..., Any], cache: ArtifactCache, *inputs: torch.Tensor) -> None:
    compiled = compile_graph(prims.trace(fn, *inputs), inputs, cache=cache)
    torch.testing.assert_close(compiled(*inputs), fn(*inputs))


def test_nll_loss_never_stores_the_log_probabilities(cache: ArtifactCache) -> None:
    inputs = _inputs()
    assert _wide_buffers(nll_of_log_softmax, *inputs) == 0
    _check(nll_of_log_softmax, cache, *inputs)


def test_a_value_using_the_gathered_position_as_a_number_is_stored(cache: ArtifactCache) -> None:
    inputs = _inputs()
    assert _wide_buffers(gather_of_positions, *inputs) == 1
    _check(gather_of_positions, cache, *inputs)


def test_a_gather_reading_more_elements_than_its_source_matches_eager(
    cache: ArtifactCache,
) -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, generator=generator)
    index = torch.randint(0, 3, (9, 4), generator=generator)
    _check(gather_repeated, cache, x, index)
