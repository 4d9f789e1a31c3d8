"""scatter_add (and index_put(accumulate=True), embedding's backward) as a copy and an atomic
accumulation loop: results match eager with repeated indices, in parallel, and a reader of
the accumulated buffer never shares its kernel."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.backend import inductor
from ember.inductor.codegen.cpp.ops import PRELUDE
from ember.inductor.ir.program import ExternNode, LoopNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.inductor.scheduler.fusion import Kernel, schedule
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("scatter-cache")))


def _compile(fn: Any, cache: ArtifactCache, *inputs: torch.Tensor) -> Any:
    return compile_graph(prims.trace(fn, *inputs), inputs, cache=cache)


def _kernels(module: str) -> str:
    """The generated kernels without the shared prelude."""
    return module.replace(PRELUDE.strip(), "")


def scatter_twice(a: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return a.scatter_add(0, index, src) * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_add_with_repeated_indices_matches_eager(
    dtype: torch.dtype, cache: ArtifactCache, caplog: pytest.LogCaptureFixture
) -> None:
    generator = torch.Generator().manual_seed(0)
    a = (torch.randn(5, 3, generator=generator) * 10).to(dtype)
    src = (torch.randn(4, 3, generator=generator) * 10).to(dtype)
    index = torch.tensor([[0, 1, 0], [0, 0, 4], [4, 4, 4], [0, 0, 0]])
    with caplog.at_level(logging.INFO, logger="ember.inductor.perf_hints"):
        compiled = _compile(scatter_twice, cache, a, index, src)
    assert "falls back" not in caplog.text
    # an accumulation loop (atomic where the kernel runs on threads; this one is too small
    # for a parallel region: codegen/test_cpp_serial_accumulation.py)
    assert "] += " in _kernels(compiled.module)
    result = compiled(a, index, src)
    torch.testing.assert_close(result, scatter_twice(a, index, src))


def scatter_along_rows(a: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return torch.scatter_add(a, 1, index, src)


def test_scatter_add_along_an_inner_dim_with_a_smaller_index(cache: ArtifactCache) -> None:
    generator = torch.Generator().manual_seed(1)
    a = torch.randn(4, 6, generator=generator)
    index = torch.randint(0, 6, (3, 5), generator=generator)
    src = torch.randn(3, 5, generator=generator)
    result = _compile(scatter_along_rows, cache, a, index, src)(a, index, src)
    torch.testing.assert_close(result, scatter_along_rows(a, index, src))


def test_many_threads_adding_into_few_elements_lose_nothing(cache: ArtifactCache) -> None:
    # 2**16 additions (above the parallel threshold) into 7 elements: a lost update shows
    generator = torch.Generator().manual_seed(2)
    src = torch.randint(-1000, 1000, (1 << 16,), generator=generator)
    index = torch.randint(0, 7, (1 << 16,), generator=generator)
    a = torch.zeros(7, dtype=torch.int64)
    result = _compile(scatter_along_rows_1d, cache, a, index, src)(a, index, src)
    torch.testing.assert_close(result, scatter_along_rows_1d(a, index, src), rtol=0, atol=0)


def scatter_along_rows_1d(a: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return a.scatter_add(0, index, src)


def scatter_then_read(a: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    total = a.scatter_add(0, index, src)
    return total + total.flip(0)


def test_a_reader_of_the_accumulated_buffer_runs_after_every_addition(
    cache: ArtifactCache,
) -> None:
    # index, src and the output share one shape: fusion by loops alone would put the reader
    # into the accumulating kernel, reading elements other iterations still add to
    a = torch.randn(6, 4)
    index = torch.tensor([[5, 0, 1, 1]] * 6)
    src = torch.randn(6, 4)
    graph = decompose(prims.trace(scatter_then_read, a, index, src), DECOMPOSITIONS)
    program = lower_graph(graph)
    atomic = [n for n in program.nodes if isinstance(n, LoopNode) and n.store_mode]
    assert [n.store_mode for n in atomic] == ["atomic_add"]
    for kernel in schedule(program):
        assert isinstance(kernel, Kernel)
        if any(m.node is atomic[0] for m in kernel.members):
            others = [m for m in kernel.members if m.node is not atomic[0]]
            assert not any(atomic[0].storage in m.node.reads() for m in others)
            assert not any(m.node.storage == atomic[0].storage for m in others)
            assert atomic[0].storage not in kernel.local_buffers
    result = _compile(scatter_then_read, cache, a, index, src)(a, index, src)
    torch.testing.assert_close(result, scatter_then_read(a, index, src))


def put_accumulate(a: torch.Tensor, rows: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return a.index_put((rows,), values, accumulate=True)


def test_index_put_with_accumulate_matches_eager(cache: ArtifactCache) -> None:
    a = torch.randn(5, 3)
    rows = torch.tensor([4, 0, 4, 4, 1])
    values = torch.randn(5, 3)
    graph = decompose(prims.trace(put_accumulate, a, rows, values), DECOMPOSITIONS)
    program = lower_graph(graph)
    assert not [n for n in program.nodes if isinstance(n, ExternNode) and n.is_fallback]
    result = _compile(put_accumulate, cache, a, rows, values)(a, rows, values)
    torch.testing.assert_close(result, put_accumulate(a, rows, values))


def embedding_loss(weight: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return (F.embedding(tokens, weight) * torch.arange(1.0, 5.0)).square().sum()


def test_embedding_backward_accumulates_gradients_of_repeated_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    weight = torch.randn(10, 4, requires_grad=True)
    tokens = torch.tensor([[1, 2, 1], [9, 1, 2]])
    with caplog.at_level(logging.INFO, logger="ember.inductor.perf_hints"):
        compiled = inductor(prims.trace(embedding_loss, weight, tokens), (weight, tokens))
        loss = compiled(weight, tokens)
        loss.backward()
    assert "falls back" in caplog.text  # the hints are on (iota of floats falls back)
    assert "scatter_add falls back" not in caplog.text  # the backward's is a loop
    ours = weight.grad
    weight.grad = None
    expected = embedding_loss(weight, tokens)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(ours, weight.grad)
