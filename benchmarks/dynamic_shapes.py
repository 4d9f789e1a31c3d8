"""Dynamic shapes on a GPT-2-style decoder (ember.capture.testing.TinyDecoder), inference over
a grid of batch sizes and prompt lengths, and optionally a training loop over lengths:
compilations, and time per call at each point for eager, ember under the default policy (one
compiled function called at every point, batch-major, starting at the first point; its
static entry and the symbolic Graphs automatic dynamic compiles then serve the grid), ember
compiled statically for that point alone, and torch.compile(dynamic=True) (--torch-compile).

    python -m benchmarks.dynamic_shapes [--backend inductor] [--width 128] [--depth 2]
        [--lengths 4,16,64,256] [--batches 1,4,16] [--torch-compile] [--train]

Times are milliseconds of this process's CPU time per call (`time.process_time`: on a shared
machine, wall time counts the other processes' turns too): the variants of a point run in
interleaved rounds (eager, dynamic, static, torch.compile, then again) and each reports its
fastest round. One CPU thread.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for source in ("src", *(f"packages/{p}/src" for p in ("prims", "capture", "autodiff"))):
    if str(ROOT / source) not in sys.path:
        sys.path.insert(0, str(ROOT / source))

import torch  # noqa: E402

import ember  # noqa: E402
from ember.capture.testing import TinyDecoder  # noqa: E402


def fastest_ms(variants: dict[str, Callable[[], Any]], calls: int, rounds: int) -> dict[str, float]:
    """Per variant, the fastest of `rounds` interleaved rounds of `calls` calls (ms/call)."""
    for fn in variants.values():
        for _ in range(2):
            fn()
    best = {name: float("inf") for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            start = time.process_time()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.process_time() - start) / calls * 1e3)
    return best


def calls_for(batch: int, length: int, budget: int) -> int:
    """Fewer calls at large points: about `budget` token-positions per round."""
    return max(3, min(40, budget // (batch * length)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--lengths", default="4,16,64,256")
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=4096, help="tokens per timing round")
    parser.add_argument(
        "--torch-compile", action="store_true", help="add torch.compile(dynamic=True)"
    )
    parser.add_argument(
        "--train", action="store_true", help="also a training loop over the lengths"
    )
    options = parser.parse_args()
    torch.set_num_threads(1)
    lengths = [int(n) for n in options.lengths.split(",")]
    batches = [int(n) for n in options.batches.split(",")]
    grid = [(b, n) for b in batches for n in lengths]
    torch.manual_seed(0)
    model = TinyDecoder(width=options.width, depth=options.depth, context=max(lengths)).eval()
    inputs = {(b, n): torch.randint(0, 50, (b, n)) for b, n in grid}

    dynamic = ember.compile(model, backend=options.backend)
    marked = ember.compile(model, backend=options.backend, dynamic=True)
    started = time.perf_counter()
    with torch.no_grad():
        for point in grid:
            expected = model(inputs[point])
            torch.testing.assert_close(dynamic(inputs[point]), expected, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(marked(inputs[point]), expected, rtol=1e-4, atol=1e-4)
    state = dynamic.forward._ember_compiled
    print(
        f"backend {options.backend}, width {options.width}, depth {options.depth}, batch-major "
        f"over batches {batches} x lengths {lengths}: ember dynamic=None "
        f"{state.captures} compilations, dynamic=True "
        f"{marked.forward._ember_compiled.captures} ({time.perf_counter() - started:.1f} s)"
    )
    for reason in state.recompile_reasons:
        print(f"  recompile: {reason}")
    peer = None
    if options.torch_compile:
        from torch import _dynamo  # the peer we measure against (benchmarks only)

        _dynamo.reset()
        peer = torch.compile(model, dynamic=True)
        with torch.no_grad():
            for point in grid:
                peer(inputs[point])
        frames = _dynamo.utils.counters["stats"]["unique_graphs"]
        print(f"torch.compile(dynamic=True): {frames} compilations over the grid")

    header = "batch  length  eager ms  ember-dynamic ms  ember-static ms  dyn/static  eager/dyn"
    print(header + ("  torch.compile(dynamic) ms" if peer is not None else ""))
    rows = []
    with torch.no_grad():
        for point in grid:
            ids = inputs[point]
            static = ember.compile(model, backend=options.backend, dynamic=False)
            torch.testing.assert_close(static(ids), model(ids), rtol=1e-4, atol=1e-4)
            variants: dict[str, Callable[[], Any]] = {
                "eager": lambda: model(ids),  # noqa: B023
                "dynamic": lambda: dynamic(ids),  # noqa: B023
                "static": lambda: static(ids),  # noqa: B023
            }
            if peer is not None:
                variants["torch.compile"] = lambda: peer(ids)  # noqa: B023
            ms = fastest_ms(variants, calls_for(*point, options.budget), options.rounds)
            rows.append((point, ms))
            row = (
                f"{point[0]:>5}  {point[1]:>6}  {ms['eager']:>8.3f}  {ms['dynamic']:>16.3f}  "
                f"{ms['static']:>15.3f}  {ms['dynamic'] / ms['static']:>10.2f}  "
                f"{ms['eager'] / ms['dynamic']:>9.2f}"
            )
            if peer is not None:
                row += f"  {ms['torch.compile']:>25.3f}"
            print(row, flush=True)
    within = sum(ms["dynamic"] <= 1.1 * ms["static"] for _, ms in rows)
    faster = sum(ms["dynamic"] < ms["eager"] for _, ms in rows)
    print(
        f"ember dynamic within 10% of static at {within}/{len(rows)} points, "
        f"faster than eager at {faster}/{len(rows)}"
    )
    if options.train:
        train(options, lengths)


def train(options: argparse.Namespace, lengths: list[int]) -> None:
    """A training loop over the lengths (batch 4): compilations and ms per step."""
    torch.manual_seed(0)
    batch = 4

    def fresh() -> tuple[TinyDecoder, torch.optim.Optimizer]:
        torch.manual_seed(0)
        net = TinyDecoder(width=options.width, depth=options.depth, context=max(lengths))
        return net, torch.optim.SGD(net.parameters(), lr=1e-3)

    def step(fn: Callable[..., Any], opt: torch.optim.Optimizer, ids: torch.Tensor) -> None:
        logits = fn(ids)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()

    eager_net, eager_opt = fresh()
    ember_net, ember_opt = fresh()
    compiled = ember.compile(ember_net, backend=options.backend)
    data = {n: torch.randint(0, 50, (batch, n)) for n in lengths}
    for n in lengths:  # the first pass compiles
        step(compiled, ember_opt, data[n])
    captures = compiled.forward._ember_compiled.captures
    print(f"training, batch {batch}, lengths {lengths}: ember {captures} compilations")
    print("length  eager ms/step  ember-dynamic ms/step  eager/dynamic")
    for n in lengths:
        ids = data[n]
        ms = fastest_ms(
            {
                "eager": lambda: step(eager_net, eager_opt, ids),  # noqa: B023
                "dynamic": lambda: step(compiled, ember_opt, ids),  # noqa: B023
            },
            calls_for(batch, n, options.budget // 2),
            options.rounds,
        )
        print(
            f"{n:>6}  {ms['eager']:>13.3f}  {ms['dynamic']:>21.3f}  {ms['eager'] / ms['dynamic']:>13.2f}"
        )


if __name__ == "__main__":
    main()
