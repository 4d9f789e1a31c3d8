"""How close a fused 10-op pointwise chain comes to one memory pass (ember-inductor, CPU).

`python -m benchmarks.inductor_pointwise_chain [--numel N]` compiles the chain with the
inductor pipeline, checks it is one kernel, and times it against `torch.clone` of the same
tensor (one read and one write of every element: the memory traffic of a perfect fusion)
and against eager PyTorch (ten passes). Reports medians of repeated runs.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

import torch

import ember.prims as prims
from ember.inductor.pipeline import compile_graph


def chain_of_ten(x: torch.Tensor) -> torch.Tensor:
    """Ten arithmetic ops: memory-bound once fused."""
    y = x * 2.0 + 1.0
    y = torch.relu(y * y - 0.5)
    y = y / (torch.abs(y) + 3.0)
    return y * 0.5 + 0.25


def transcendental_chain(x: torch.Tensor) -> torch.Tensor:
    """Ten ops with sin, cos, exp and tanh: compute-bound (scalar libm calls)."""
    y = x * 2.0 + 1.0
    y = torch.sin(y) * torch.cos(y)
    y = torch.relu(y - 0.5)
    y = torch.exp(-y) / (y + 3.0)
    return torch.tanh(y)


def median_seconds(fn: Callable[[], object], repeats: int = 30) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--numel", type=int, default=1 << 24)
    args = parser.parse_args()
    x = torch.randn(args.numel)
    one_pass = median_seconds(lambda: torch.clone(x))
    megabytes = 2 * x.numel() * x.element_size() / 1e6
    print(f"numel {args.numel}, threads {torch.get_num_threads()}")
    print(
        f"one memory pass (clone): {one_pass * 1e3:.2f} ms ({megabytes / one_pass / 1e3:.1f} GB/s)"
    )
    for chain in (chain_of_ten, transcendental_chain):
        compiled = compile_graph(prims.trace(chain, x), (x,))
        assert compiled.kernel_count == 1, compiled.kernel_count
        torch.testing.assert_close(compiled(x), chain(x))
        fused = median_seconds(functools.partial(compiled, x))
        eager = median_seconds(functools.partial(chain, x))
        print(
            f"{chain.__name__}: ember 1 kernel {fused * 1e3:.2f} ms = {fused / one_pass:.2f}x "
            f"one pass; eager {eager * 1e3:.2f} ms = {eager / one_pass:.2f}x"
        )


if __name__ == "__main__":
    main()
