"""Dynamic shapes on a GPT-2-style decoder (ember.capture.testing.TinyDecoder), inference over
a grid of batch sizes and prompt lengths, and optionally a training loop over lengths:
compilations, and time per call at each point for eager, ember under the default policy (one
compiled function called at every point, batch-major, starting at the first point; its
static entry and the symbolic Graphs automatic dynamic compiles then serve the grid), ember
compiled statically for that point alone, and torch.compile(dynamic=True) (--torch-compile),
all in one process.

    python -m benchmarks.dynamic_shapes [--device cpu|cuda] [--preset gpt2-small]
        [--backend inductor] [--width 128] [--depth 2] [--heads 4] [--vocab 50]
        [--lengths 4,16,64,256] [--batches 1,4,16] [--torch-compile] [--train]
        [--dtype float32|bfloat16] [--out rows.jsonl]

CPU: milliseconds of this process's CPU time per call (`time.process_time`: on a shared
machine, wall time counts the other processes' turns too), one thread; the variants of a point
run in interleaved rounds (eager, dynamic, static, torch.compile, then again) and each reports
its fastest round. CUDA: CUDA events around each round of calls after a warm-up, the same
interleaved rounds, each variant's median round; `--dtype bfloat16` (the default on CUDA) runs
every variant under bf16 autocast. `--preset gpt2-small` is GPT-2 small's shape (width 768,
12 blocks of 12 heads, vocabulary 50257). `--out` appends one JSON object per line: the
compilation counts, each grid point, each training length.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from math import inf
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for source in ("src", *(f"packages/{p}/src" for p in ("prims", "capture", "autodiff"))):
    if str(ROOT / source) not in sys.path:
        sys.path.insert(0, str(ROOT / source))

import torch  # noqa: E402

import ember  # noqa: E402
from ember.capture.testing import TinyDecoder  # noqa: E402

PRESETS = {"gpt2-small": {"width": 768, "depth": 12, "heads": 12, "vocab": 50257}}
DEFAULTS = {"width": 128, "depth": 2, "heads": 4, "vocab": 50}


class Bench:
    """The run's settings and where its rows go: device, autocast, timing, --out."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.device = torch.device(options.device)
        self.dtype = getattr(torch, options.dtype)
        self.out = open(options.out, "a") if options.out else None  # noqa: SIM115
        self.errors: dict[str, float] = {}  # worst relative error against eager (GPU)
        self.keep_going = self.device.type == "cuda"  # see attempt()
        self.started = time.perf_counter()

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def record(self, **row: Any) -> None:
        if self.out is not None:
            self.out.write(json.dumps({"device": self.device.type, **row}) + "\n")
            self.out.flush()

    def attempt(self, name: str, fn: Callable[[], Any]) -> float | None:
        """Wall seconds of `fn` (a variant's compilations and first calls); on CUDA, where a
        run is one long device call, a variant that raises is printed, recorded and left out
        (None) so the others still report. On CPU an error propagates."""
        if not self.keep_going:
            return self.timed(fn)
        try:
            return self.timed(fn)
        except Exception as error:  # noqa: BLE001 - one variant's failure must not end the run
            text = "".join(traceback.format_exception_only(error)).strip()
            print(f"ERROR {name}: {text}", flush=True)
            traceback.print_exc(limit=-6)
            self.record(kind="error", variant=name, error=text[:4000])
            return None

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def calls(self, tokens: int, budget: int) -> int:
        """Calls per timing round: about `budget` token-positions on CPU, fixed on CUDA."""
        if self.device.type == "cuda":
            return self.options.cuda_calls
        return max(3, min(40, budget // tokens))

    def time_ms(self, variants: dict[str, Callable[[], Any]], calls: int) -> dict[str, float]:
        """Per variant, ms per call over interleaved rounds of `calls` calls: the fastest
        round of CPU time on CPU, the median round of CUDA-event time on CUDA."""
        for fn in variants.values():
            for _ in range(3 if self.device.type == "cuda" else 2):
                fn()
        self.synchronize()
        rounds: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(self.options.rounds):
            for name, fn in variants.items():
                rounds[name].append(self._round_ms(fn, calls))
        if self.device.type == "cuda":
            return {name: statistics.median(times) for name, times in rounds.items()}
        return {name: min(times) for name, times in rounds.items()}

    def _round_ms(self, fn: Callable[[], Any], calls: int) -> float:
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.synchronize()
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / calls
        begun = time.process_time()
        for _ in range(calls):
            fn()
        return (time.process_time() - begun) / calls * 1e3

    def check(self, name: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
        """Values against eager: 1e-4 in float32 on CPU (raises); otherwise the relative norm
        error, the worst per variant kept in `errors` and printed when past 1e-3 (float32)
        or 3e-2 (bf16) rather than ending a long GPU run."""
        if self.device.type == "cpu" and self.dtype == torch.float32:
            torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
            return
        error = ((actual.float() - expected.float()).norm() / expected.float().norm()).item()
        self.errors[name] = max(self.errors.get(name, 0.0), error)
        bound = 1e-3 if self.dtype == torch.float32 else 3e-2
        if not error <= bound:
            print(f"WARNING: {name}: relative error {error:.2e} against eager exceeds {bound:.0e}")

    def timed(self, fn: Callable[[], Any]) -> float:
        """Wall seconds of `fn`, device work included (compilations)."""
        self.synchronize()
        begun = time.perf_counter()
        fn()
        self.synchronize()
        return time.perf_counter() - begun


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--preset", choices=sorted(PRESETS), help="a model shape")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--width", type=int)
    parser.add_argument("--depth", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--vocab", type=int)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), help="bf16 runs autocast")
    parser.add_argument("--lengths", default="4,16,64,256")
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=4096, help="CPU: tokens per timing round")
    parser.add_argument("--cuda-calls", type=int, default=20, help="CUDA: calls per round")
    parser.add_argument(
        "--torch-compile", action="store_true", help="add torch.compile(dynamic=True)"
    )
    parser.add_argument(
        "--train", action="store_true", help="also a training loop over the lengths"
    )
    parser.add_argument("--train-batch", type=int, default=4)
    parser.add_argument("--skip-inference", action="store_true", help="only --train's loop")
    parser.add_argument(
        "--stop-after", type=float, help="seconds: start no grid point after this (a device budget)"
    )
    parser.add_argument("--out", help="append the results as JSON lines to this file")
    options = parser.parse_args(argv)
    shape = {**DEFAULTS, **PRESETS.get(options.preset or "", {})}
    for name, value in shape.items():
        if getattr(options, name) is None:
            setattr(options, name, value)
    if options.dtype is None:
        options.dtype = "bfloat16" if options.device == "cuda" else "float32"
    return options


def main(argv: Sequence[str] | None = None) -> None:
    options = parse(argv)
    bench = Bench(options)
    if bench.device.type == "cpu":
        torch.set_num_threads(1)
    lengths = [int(n) for n in options.lengths.split(",")]
    batches = [int(n) for n in options.batches.split(",")]
    if not options.skip_inference:
        inference(bench, lengths, batches)
    if options.train:
        train(bench, lengths)


def inference(bench: Bench, lengths: list[int], batches: list[int]) -> None:
    """The grid: compilations of each variant, then per point ms per call side by side."""
    options = bench.options
    grid = [(b, n) for b in batches for n in lengths]
    torch.manual_seed(0)
    model = decoder(options, max(lengths)).eval().to(bench.device)
    inputs = {(b, n): torch.randint(0, options.vocab, (b, n), device=bench.device) for b, n in grid}
    shape = (
        f"{options.device} {options.dtype}, width {options.width}, depth {options.depth}, "
        f"heads {options.heads}, vocabulary {options.vocab}"
    )

    def first_calls(name: str, fn: Callable[..., Any]) -> None:
        with torch.no_grad(), bench.autocast():
            for point in grid:
                bench.check(name, fn(inputs[point]), model(inputs[point]))

    compiled = {
        "dynamic": ember.compile(model, backend=options.backend),
        "dynamic=True": ember.compile(model, backend=options.backend, dynamic=True),
    }
    compile_s = {}
    for name, fn in list(compiled.items()):
        seconds = bench.attempt(name, lambda name=name, fn=fn: first_calls(name, fn))
        if seconds is None:
            del compiled[name]
        else:
            compile_s[name] = seconds
    state = ember_state(compiled.get("dynamic"))
    captures: dict[str, Any] = {
        "dynamic=None": state.captures if state else None,
        "dynamic=True": getattr(ember_state(compiled.get("dynamic=True")), "captures", None),
    }
    print(
        f"backend {options.backend}, {shape}, batch-major over batches {batches} x lengths "
        f"{lengths}: ember dynamic=None {captures['dynamic=None']} compilations "
        f"({compile_s.get('dynamic', float('nan')):.1f} s over the grid's first calls), "
        f"dynamic=True {captures['dynamic=True']} "
        f"({compile_s.get('dynamic=True', float('nan')):.1f} s)",
        flush=True,
    )
    for reason in state.recompile_reasons if state else []:
        print(f"  recompile: {reason}")
    # At one batch size over all lengths (the count), each batch in a fresh compile();
    # captured with the eager backend: what capture compiles does not depend on the backend.
    per_batch = {}
    for b in batches:
        sweep = ember.compile(model, backend="eager")
        with torch.no_grad(), bench.autocast():
            for n in lengths:
                sweep(inputs[(b, n)])
        per_batch[b] = sweep.forward._ember_compiled.captures
    captures["dynamic=None, per batch over the lengths"] = per_batch
    print(f"ember dynamic=None at one batch size over all lengths: {per_batch} compilations")
    if options.torch_compile:
        from torch import _dynamo  # the peer we measure against (benchmarks only)

        _dynamo.reset()
        peer = torch.compile(model, dynamic=True)
        seconds = bench.attempt("torch.compile", lambda: first_calls("torch.compile", peer))
        if seconds is not None:
            compiled["torch.compile"] = peer
            compile_s["torch.compile"] = seconds
            graphs = _dynamo.utils.counters["stats"]["unique_graphs"]
            captures["torch.compile(dynamic=True)"] = graphs
            print(
                f"torch.compile(dynamic=True): {graphs} compilations over the grid "
                f"({seconds:.1f} s)",
                flush=True,
            )
    bench.record(
        kind="compilations",
        backend=options.backend,
        dtype=options.dtype,
        width=options.width,
        depth=options.depth,
        heads=options.heads,
        vocab=options.vocab,
        batches=batches,
        lengths=lengths,
        compilations=captures,
        recompile_reasons=state.recompile_reasons if state else None,
        compile_s={name: round(seconds, 2) for name, seconds in compile_s.items()},
        relative_errors=dict(bench.errors),
    )

    unit = "ms (CPU time, fastest round)" if bench.device.type == "cpu" else "ms (median round)"
    print(f"per call, {unit}:")
    header = "batch  length  eager ms  ember-dynamic ms  ember-static ms  dyn/static  eager/dyn"
    peer_timed = "torch.compile" in compiled
    print(header + ("  torch.compile(dynamic) ms" if peer_timed else ""), flush=True)
    rows = []
    for point in grid:
        spent = time.perf_counter() - bench.started
        if options.stop_after is not None and spent > options.stop_after:
            print(f"stopping after {spent:.0f} s (--stop-after): {len(rows)} points measured")
            break
        ids = inputs[point]

        def call(fn: Callable[..., Any], ids: torch.Tensor = ids) -> Callable[[], Any]:
            def run() -> Any:
                with torch.no_grad(), bench.autocast():
                    return fn(ids)

            return run

        variants = {"eager": call(model)}
        if "dynamic" in compiled:
            variants["dynamic"] = call(compiled["dynamic"])
        static = ember.compile(model, backend=options.backend, dynamic=False)
        static_s = bench.attempt(
            "static",
            lambda: bench.check("static", call(static)(), call(model)()),  # noqa: B023
        )
        if static_s is not None:
            variants["static"] = call(static)
        if peer_timed:
            variants["torch.compile"] = call(compiled["torch.compile"])
        ms = bench.time_ms(variants, bench.calls(point[0] * point[1], options.budget))
        rows.append((point, ms))
        row = (
            f"{point[0]:>5}  {point[1]:>6}  {ms['eager']:>8.3f}  {cell(ms, 'dynamic'):>16}  "
            f"{cell(ms, 'static'):>15}  {ratio(ms, 'dynamic', 'static'):>10}  "
            f"{ratio(ms, 'eager', 'dynamic'):>9}"
        )
        if peer_timed:
            row += f"  {cell(ms, 'torch.compile'):>25}"
        print(row, flush=True)
        bench.record(
            kind="inference",
            batch=point[0],
            length=point[1],
            ms=ms,
            static_compile_s=None if static_s is None else round(static_s, 2),
            static_relative_error=bench.errors.pop("static", None),
        )
    if not rows:
        return
    within = sum(ms.get("dynamic", inf) <= 1.1 * ms.get("static", -inf) for _, ms in rows)
    faster = sum(ms.get("dynamic", inf) < ms["eager"] for _, ms in rows)
    summary = (
        f"ember dynamic within 10% of static at {within}/{len(rows)} points, "
        f"faster than eager at {faster}/{len(rows)}"
    )
    if peer_timed:
        ahead = sum(ms.get("dynamic", inf) < ms["torch.compile"] for _, ms in rows)
        summary += f", faster than torch.compile(dynamic=True) at {ahead}/{len(rows)}"
    print(summary, flush=True)
    bench.record(kind="summary", text=summary)


def ember_state(compiled: Any) -> Any:
    """The capture state behind an ember-compiled module (captures, recompile reasons)."""
    return None if compiled is None else compiled.forward._ember_compiled


def cell(ms: dict[str, float], name: str) -> str:
    return f"{ms[name]:.3f}" if name in ms else "-"


def ratio(ms: dict[str, float], numerator: str, denominator: str) -> str:
    if numerator not in ms or denominator not in ms:
        return "-"
    return f"{ms[numerator] / ms[denominator]:.2f}"


def decoder(options: argparse.Namespace, context: int) -> TinyDecoder:
    return TinyDecoder(
        vocab=options.vocab,
        width=options.width,
        heads=options.heads,
        depth=options.depth,
        context=context,
    )


def train(bench: Bench, lengths: list[int]) -> None:
    """A training loop over the lengths: compilations and ms per step (forward, loss,
    backward, SGD step) for eager, ember under the default policy and torch.compile."""
    options = bench.options
    batch = options.train_batch

    def fresh() -> tuple[TinyDecoder, torch.optim.Optimizer]:
        torch.manual_seed(0)
        net = decoder(options, max(lengths)).to(bench.device)
        return net, torch.optim.SGD(net.parameters(), lr=1e-3)

    def step(fn: Callable[..., Any], opt: torch.optim.Optimizer, ids: torch.Tensor) -> None:
        with bench.autocast():
            logits = fn(ids)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()

    nets = {"eager": fresh(), "dynamic": fresh()}
    runs: dict[str, Callable[..., Any]] = {
        "eager": nets["eager"][0],
        "dynamic": ember.compile(nets["dynamic"][0], backend=options.backend),
    }
    if options.torch_compile:
        from torch import _dynamo

        _dynamo.reset()
        nets["torch.compile"] = fresh()
        runs["torch.compile"] = torch.compile(nets["torch.compile"][0], dynamic=True)
    data = {n: torch.randint(0, options.vocab, (batch, n), device=bench.device) for n in lengths}
    compile_s = {}
    for name in [name for name in runs if name != "eager"]:
        seconds = bench.attempt(
            f"training {name}",
            lambda name=name: [step(runs[name], nets[name][1], data[n]) for n in lengths],
        )
        if seconds is None:
            del runs[name]
        else:
            compile_s[name] = seconds
    captures = {"dynamic=None": getattr(ember_state(runs.get("dynamic")), "captures", None)}
    if "torch.compile" in runs:
        captures["torch.compile(dynamic=True)"] = _dynamo.utils.counters["stats"]["unique_graphs"]
    print(
        f"training, batch {batch}, lengths {lengths}: ember {captures['dynamic=None']} "
        f"compilations ({compile_s.get('dynamic', float('nan')):.1f} s over the first steps)"
        + (
            f", torch.compile(dynamic=True) {captures['torch.compile(dynamic=True)']} "
            f"({compile_s['torch.compile']:.1f} s)"
            if "torch.compile" in runs
            else ""
        ),
        flush=True,
    )
    bench.record(
        kind="training compilations",
        batch=batch,
        lengths=lengths,
        compilations=captures,
        compile_s={name: round(seconds, 2) for name, seconds in compile_s.items()},
    )
    header = (
        "length  eager ms/step  ember-dynamic ms/step  ember-static ms/step  dyn/static  "
        "eager/dynamic"
    )
    print(header + ("  torch.compile ms/step" if "torch.compile" in runs else ""))
    rows = []
    for n in lengths:
        variants = {
            name: (lambda name=name, ids=data[n]: step(runs[name], nets[name][1], ids))
            for name in runs
        }
        # ember compiled for this length alone (its own net, so its steps train nothing else).
        net, opt = fresh()
        static = ember.compile(net, backend=options.backend, dynamic=False)
        static_s = bench.attempt(
            f"training static {n}",
            lambda static=static, opt=opt, ids=data[n]: step(static, opt, ids),
        )
        if static_s is not None:
            variants["static"] = lambda static=static, opt=opt, ids=data[n]: step(static, opt, ids)
        ms = bench.time_ms(variants, bench.calls(batch * n, options.budget // 2))
        rows.append(ms)
        row = (
            f"{n:>6}  {ms['eager']:>13.3f}  {cell(ms, 'dynamic'):>21}  {cell(ms, 'static'):>20}  "
            f"{ratio(ms, 'dynamic', 'static'):>10}  {ratio(ms, 'eager', 'dynamic'):>13}"
        )
        if "torch.compile" in runs:
            row += f"  {cell(ms, 'torch.compile'):>21}"
        print(row, flush=True)
        bench.record(
            kind="training",
            batch=batch,
            length=n,
            ms=ms,
            static_compile_s=None if static_s is None else round(static_s, 2),
        )
    within = sum(ms.get("dynamic", inf) <= 1.1 * ms.get("static", -inf) for ms in rows)
    faster = sum(ms.get("dynamic", inf) < ms["eager"] for ms in rows)
    print(
        f"training: ember dynamic within 10% of static at {within}/{len(rows)} lengths, "
        f"faster than eager at {faster}/{len(rows)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
