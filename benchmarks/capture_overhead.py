"""Per-call overhead of a compiled tiny function: ember's guard check plus dispatch, next to
torch.compile's, measured in the same process on the same function.

    python -m benchmarks.capture_overhead [--calls 20000]

Rows: plain eager; ember with a backend that returns a fixed Python callable (guard check,
argument binding and the generated entry function only); ember with the `eager` backend
(adds the prims Interpreter); torch.compile with its `eager` backend (Dynamo's guards and
frame evaluation only). Numbers are microseconds per call, median of 5 runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for source in ("packages/prims/src", "packages/capture/src"):
    if str(ROOT / source) not in sys.path:
        sys.path.insert(0, str(ROOT / source))

import torch  # noqa: E402

import ember.capture  # noqa: E402
from ember.prims import Graph  # noqa: E402


def tiny(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def fixed_backend(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """A backend whose compiled callable is plain Python: isolates capture's own overhead."""
    del graph, example_inputs
    return lambda x, y: (torch.add(x, y),)


def per_call_us(fn: Callable[..., Any], args: tuple[Any, ...], calls: int) -> float:
    for _ in range(100):
        fn(*args)
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        runs.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20000)
    options = parser.parse_args()
    torch.set_num_threads(1)
    args = (torch.randn(8), torch.randn(8))
    rows = {
        "eager (no compile)": tiny,
        "ember.compile, fixed-callable backend": ember.capture.compile(tiny, backend=fixed_backend),
        "ember.compile, backend='eager'": ember.capture.compile(tiny, backend="eager"),
        "torch.compile, backend='eager'": torch.compile(tiny, backend="eager"),
    }
    baseline = per_call_us(tiny, args, options.calls)
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, 1 thread")
    print(f"{'configuration':<42} {'us/call':>9} {'overhead':>9}")
    for name, fn in rows.items():
        cost = per_call_us(fn, args, options.calls)
        print(f"{name:<42} {cost:9.2f} {cost - baseline:9.2f}")


if __name__ == "__main__":
    main()
