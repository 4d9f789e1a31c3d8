"""Several threads calling one `ember.compile`d module at once: the first calls (each thread
may capture and compile) and the steady state, for several shapes, inference and training,
must all equal eager. A capture must never change the module other threads are using."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import torch
from torch import nn

import ember

THREADS = 8
STEPS = 3


class Block(nn.Module):
    """User code around torch.nn leaf modules (which capture runs on tracing tensors)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(torch.nn.functional.gelu(self.embed(x)))
        h = h + self.attention(h, h, h, need_weights=False)[0]
        return self.head(h).softmax(-1)


def _run_threads(work: Callable[[int], None]) -> list[str]:
    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def run(index: int) -> None:
        try:
            start.wait()  # every thread makes its first call at the same moment
            work(index)
        except Exception as error:  # noqa: BLE001 - reported below with the thread's index
            errors.append(f"thread {index}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def _input(index: int, step: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(100 * index + step)
    return torch.randn(1 + index % 3, 2 + step % 2, 8, generator=generator)  # several shapes


# Threads that miss the cache together must share one capture per shape: duplicate entries
# would reach the cache-size limit and turn later calls eager.
no_eager_fallback = pytest.mark.filterwarnings("error::ember.capture.RecompileLimitWarning")


@no_eager_fallback
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_threads_first_calls_and_steady_state_equal_eager(backend: str) -> None:
    torch.manual_seed(0)
    model = Block().eval()
    compiled = ember.compile(model, backend=backend)

    def work(index: int) -> None:
        for step in range(STEPS):
            x = _input(index, step)
            with torch.no_grad():
                expected = model(x)  # eager, while other threads capture the same module
                actual = compiled(x)
            torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)

    assert _run_threads(work) == []


@no_eager_fallback
def test_threads_training_gradients_equal_eager() -> None:
    torch.manual_seed(0)
    model = Block()
    compiled = ember.compile(model, backend="aot_eager")
    parameters = list(model.parameters())

    def work(index: int) -> None:
        for step in range(STEPS):
            x = _input(index, step).requires_grad_()
            expected = model(x)
            expected_grads = torch.autograd.grad(expected.sum(), [x, *parameters])
            actual = compiled(x)
            actual_grads = torch.autograd.grad(actual.sum(), [x, *parameters])
            torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(actual_grads, expected_grads, rtol=1e-4, atol=1e-5)

    assert _run_threads(work) == []
