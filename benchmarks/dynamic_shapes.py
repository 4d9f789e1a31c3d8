"""Dynamic shapes on a GPT-2-style decoder (ember.capture.testing.TinyDecoder), inference:
compilations over prompt lengths, and time per call at each length for eager, ember under
the default policy (called first at --first, which gets the static entry; one Graph with
the length symbolic then serves every measured length), and ember compiled statically
for that length alone.

    python -m benchmarks.dynamic_shapes [--backend inductor] [--width 128] [--depth 2]
        [--lengths 8,32,64,128,256] [--batch 2] [--torch-compile]

Times are milliseconds per call, median of 5 runs of --calls calls, one CPU thread.
"""

from __future__ import annotations

import argparse
import statistics
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


def per_call_ms(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(3):
        fn()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls * 1e3)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--lengths", default="8,32,64,128,256")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument(
        "--first", type=int, default=4, help="the length of the first call (the static entry)"
    )
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument(
        "--torch-compile", action="store_true", help="add torch.compile(dynamic=True)"
    )
    options = parser.parse_args()
    torch.set_num_threads(1)
    lengths = [int(n) for n in options.lengths.split(",")]
    torch.manual_seed(0)
    model = TinyDecoder(width=options.width, depth=options.depth, context=max(lengths)).eval()
    inputs = {n: torch.randint(0, 50, (options.batch, n)) for n in (options.first, *lengths)}
    dynamic = ember.compile(model, backend=options.backend)
    started = time.perf_counter()
    with torch.no_grad():
        for n in (options.first, *lengths):
            torch.testing.assert_close(dynamic(inputs[n]), model(inputs[n]), rtol=1e-4, atol=1e-4)
    state = dynamic.forward._ember_compiled
    print(
        f"ember default policy, backend {options.backend}: {state.captures} compilations over "
        f"lengths {[options.first, *lengths]} ({time.perf_counter() - started:.1f} s with the first calls)"
    )
    peer = torch.compile(model, dynamic=True) if options.torch_compile else None
    header = "length  eager ms  ember-dynamic ms  ember-static ms  dynamic/static  eager/dynamic"
    print(header + ("  torch.compile(dynamic) ms" if peer is not None else ""))
    with torch.no_grad():
        for n in lengths:
            ids = inputs[n]
            static = ember.compile(model, backend=options.backend, dynamic=False)
            torch.testing.assert_close(static(ids), model(ids), rtol=1e-4, atol=1e-4)
            eager_ms = per_call_ms(lambda: model(ids), options.calls)  # noqa: B023
            dynamic_ms = per_call_ms(lambda: dynamic(ids), options.calls)  # noqa: B023
            static_ms = per_call_ms(lambda: static(ids), options.calls)  # noqa: B023
            row = (
                f"{n:>6}  {eager_ms:>8.3f}  {dynamic_ms:>16.3f}  {static_ms:>15.3f}  "
                f"{dynamic_ms / static_ms:>14.2f}  {eager_ms / dynamic_ms:>13.2f}"
            )
            if peer is not None:
                row += f"  {per_call_ms(lambda: peer(ids), options.calls):>25.3f}"  # noqa: B023
            print(row, flush=True)
    assert state.captures <= 2, state.recompile_reasons


if __name__ == "__main__":
    main()
