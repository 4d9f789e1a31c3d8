"""A scatter-add in a kernel that runs on one thread adds without atomics, and with SIMD where
its lanes add into distinct elements (an embedding's backward: one token's row a loop over
features); repeated indices still sum as eager's. A kernel large enough for threads keeps its
atomics. Checked on GCC's vectorization report and on eager's values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import ember.prims as prims
from ember.inductor.codegen.cpp.parallel_regions import PARALLEL_THRESHOLD
from ember.inductor.pipeline import compile_graph

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from cpp_build import needs_compiler, vectorized_loop_lines  # noqa: E402


def _embedding_backward(grad: torch.Tensor, tokens: torch.Tensor, vocabulary: int) -> torch.Tensor:
    return torch.zeros(vocabulary, grad.shape[-1], dtype=grad.dtype).index_add(0, tokens, grad)


def _inputs(
    tokens: int, width: int, vocabulary: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(width)
    grad = torch.randn(tokens, width, generator=generator).to(dtype)
    # few rows for many tokens: every row is added into several times
    index = torch.randint(0, vocabulary, (tokens,), generator=generator)
    return grad, index


def _scatter_kernel(module: str) -> list[str]:
    start = module.index('extern "C" void cpp_fused_scatter_add')
    return module[start:].split("\n}\n", 1)[0].splitlines()


@needs_compiler
def test_a_small_embedding_backward_adds_rows_in_a_vectorized_loop(tmp_path: Path) -> None:
    grad, tokens = _inputs(128, 128, 30)
    assert grad.numel() < PARALLEL_THRESHOLD
    fn = lambda g, t: _embedding_backward(g, t, 30)  # noqa: E731
    compiled = compile_graph(prims.trace(fn, grad, tokens), (grad, tokens))
    torch.testing.assert_close(compiled(grad, tokens), fn(grad, tokens))
    module: str = compiled.module
    kernel = _scatter_kernel(module)
    assert not any("omp atomic" in line for line in kernel)
    first = module.splitlines().index(kernel[0]) + 1
    vectorized = vectorized_loop_lines(module, tmp_path)
    assert any(first <= line < first + len(kernel) for line in vectorized), (first, vectorized)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("width", [1, 7, 100, 130])
def test_serial_accumulations_with_repeated_rows_equal_eager(
    width: int, dtype: torch.dtype
) -> None:
    grad, tokens = _inputs(64, width, 5, dtype)
    fn = lambda g, t: _embedding_backward(g, t, 5)  # noqa: E731
    compiled = compile_graph(prims.trace(fn, grad, tokens), (grad, tokens))
    torch.testing.assert_close(compiled(grad, tokens), fn(grad, tokens))


def _index_add_1d(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.zeros(7).index_add(0, index, values)


@needs_compiler
def test_lanes_that_may_add_into_one_element_stay_scalar(tmp_path: Path) -> None:
    # a 1-D index_add: the index changes along the only loop, so two lanes may meet
    generator = torch.Generator().manual_seed(3)
    values = torch.randn(1000, generator=generator)
    index = torch.randint(0, 7, (1000,), generator=generator)
    compiled = compile_graph(prims.trace(_index_add_1d, values, index), (values, index))
    torch.testing.assert_close(compiled(values, index), _index_add_1d(values, index))
    kernel = _scatter_kernel(compiled.module)
    assert not any("omp simd" in line for line in kernel)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_threaded_scatter_keeps_its_atomics_and_equals_eager(threads: int) -> None:
    # large enough for threads: atomics in the threaded loops, a twin of plain `+=` for a
    # run on one thread; both add repeated rows as eager does
    grad, tokens = _inputs(512, 256, 9)
    assert grad.numel() >= PARALLEL_THRESHOLD
    fn = lambda g, t: _embedding_backward(g, t, 9)  # noqa: E731
    compiled = compile_graph(prims.trace(fn, grad, tokens), (grad, tokens))
    kernel = "\n".join(_scatter_kernel(compiled.module))
    one_thread, threaded = kernel.split("omp_get_max_threads() == 1", 1)[1].split("else {", 1)
    assert "omp atomic" not in one_thread and "omp simd" in one_thread
    assert "omp parallel" in threaded and "omp atomic" in threaded
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.testing.assert_close(compiled(grad, tokens), fn(grad, tokens))
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_threaded_scatter_whose_lanes_may_meet_equals_eager(threads: int) -> None:
    # a 1-D index_add over 40000 values into 7: the one-thread twin adds in a scalar loop
    generator = torch.Generator().manual_seed(4)
    values = torch.randn(40000, generator=generator)
    index = torch.randint(0, 7, (40000,), generator=generator)
    compiled = compile_graph(prims.trace(_index_add_1d, values, index), (values, index))
    kernel = "\n".join(_scatter_kernel(compiled.module))
    one_thread = kernel.split("omp_get_max_threads() == 1", 1)[1].split("else {", 1)[0]
    assert "omp simd" not in one_thread and "omp atomic" not in one_thread
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # float sums in another order than eager's: rounding apart
        torch.testing.assert_close(
            compiled(values, index), _index_add_1d(values, index), rtol=1e-5, atol=1e-3
        )
    finally:
        torch.set_num_threads(before)
