"""Per-kernel CPU micro-benchmarks: eager, torch.compile and ember-inductor, interleaved.

`python -m benchmarks.inductor_cpu_kernels [--cases a,b] [--rounds N] [--source DIR]` compiles
each case (a pointwise chain, softmax over rows, layer norm, sums over the inner and the outer
dim, a transposed copy) with torch.compile (CPU inductor) and with `ember.compile` (backend
inductor), checks ember's result against eager, then times the three **in turn, round by
round** (eager, torch.compile, ember, eager, ...), so that load from other processes on a
shared host hits all three alike. Each round times a batch of calls; the medians of the
rounds are reported as milliseconds per call and as speedups over eager (and ember over
torch.compile from the minimums too, the less noisy figure on a loaded host). Run with
`EMBER_INDUCTOR_CACHE=0` after editing the code generator: the artifact cache is keyed by
the graph and the package version, not by the generator's source. `--source DIR`
writes ember's generated C++ of each case there. Sized to finish in under a minute on
2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., torch.Tensor]
    inputs: Callable[[], tuple[torch.Tensor, ...]]


def _pointwise_chain(x: torch.Tensor) -> torch.Tensor:
    y = x * 2.0 + 1.0
    y = torch.relu(y * y - 0.5)
    y = y / (torch.abs(y) + 3.0)
    return y * 0.5 + 0.25


def _gelu_chain(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x * 1.5 + 0.5)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias)


def _sum_inner(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


def _sum_outer(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=0)


def _amax_inner(x: torch.Tensor) -> torch.Tensor:
    return x.amax(dim=-1)


def _transpose(x: torch.Tensor) -> torch.Tensor:
    return (x.t() * 2.0).contiguous()


def _randn(*shape: int) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: (torch.randn(*shape, generator=torch.Generator().manual_seed(0)),)


CASES = {
    case.name: case
    for case in (
        Case("pointwise_chain", _pointwise_chain, _randn(1 << 22)),
        Case("gelu", _gelu_chain, _randn(1 << 21)),
        Case("softmax_rows", _softmax, _randn(2048, 1024)),
        Case(
            "layer_norm",
            _layer_norm,
            lambda: (
                torch.randn(2048, 768, generator=torch.Generator().manual_seed(0)),
                torch.randn(768, generator=torch.Generator().manual_seed(1)),
                torch.randn(768, generator=torch.Generator().manual_seed(2)),
            ),
        ),
        Case("sum_inner", _sum_inner, _randn(4096, 1024)),
        Case("sum_outer", _sum_outer, _randn(1024, 4096)),
        Case("amax_inner", _amax_inner, _randn(4096, 1024)),
        Case("transpose", _transpose, _randn(2048, 2048)),
    )
}


def _batch(fn: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls


def _check(
    case: Case, inputs: tuple[torch.Tensor, ...], ours: torch.Tensor, eager: torch.Tensor
) -> None:
    """ember's result equals eager's, or, where two float32 results differ by rounding (a
    long row sum: 1.9e-5 apart), is no further from a float64 evaluation than twice eager's."""
    try:
        torch.testing.assert_close(ours, eager)
    except AssertionError:
        wide = [t.double() if t.is_floating_point() else t for t in inputs]
        exact = case.fn(*wide)
        ours_error = (ours.double() - exact).abs().max().item()
        eager_error = (eager.double() - exact).abs().max().item()
        if ours_error > 2 * eager_error:
            raise


def run_case(case: Case, rounds: int, source: Path | None) -> dict[str, float]:
    """Medians (and, keyed "<name> min", minimums) of seconds per call."""
    import torch._dynamo

    import ember

    inputs = case.inputs()
    eager = case.fn
    peer = torch.compile(case.fn)
    ours = ember.compile(case.fn, backend="inductor")
    _check(case, inputs, ours(*inputs), eager(*inputs))
    if source is not None:
        _write_source(case, inputs, source)
    runners = {"eager": eager, "torch.compile": peer, "ember": ours}
    one = _batch(lambda: eager(*inputs), 3)
    calls = max(1, int(0.01 / max(one, 1e-6)))  # ~10 ms per batch
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, runner in runners.items():
            samples[name].append(_batch(lambda r=runner: r(*inputs), calls))  # type: ignore[misc]
    torch._dynamo.reset()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return medians | {f"{name} min": min(values) for name, values in samples.items()}


def _write_source(case: Case, inputs: tuple[torch.Tensor, ...], directory: Path) -> None:
    import ember.prims as prims
    from ember.inductor.pipeline import compile_graph

    compiled = compile_graph(prims.trace(case.fn, *inputs), inputs)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{case.name}.cpp").write_text(compiled.module + "\n" + compiled.source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--source", type=Path, default=None)
    args = parser.parse_args()
    print(f"threads {torch.get_num_threads()}, torch {torch.__version__}")
    print(
        "| case | eager ms | torch.compile ms | ember ms | torch.compile/eager | ember/eager "
        "| ember/torch.compile | same, from minimums |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        times = run_case(CASES[name], args.rounds, args.source)
        e, p, o = times["eager"], times["torch.compile"], times["ember"]
        best = times["torch.compile min"] / times["ember min"]
        print(
            f"| {name} | {e * 1e3:.3f} | {p * 1e3:.3f} | {o * 1e3:.3f} | "
            f"{e / p:.2f}x | {e / o:.2f}x | {p / o:.2f}x | {best:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
