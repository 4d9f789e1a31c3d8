"""Batch-norm column reductions on the GPU: ember's kernels against torch.compile's (issue 17).

`python -m benchmarks.column_reductions [--shapes 256x56,64x112,512x28] [--kinds stats,sums]`
times, for each channels-last bf16 map [batch, C, H, W] (ResNet-50's batch-norm inputs), the
two reductions of a batch-norm training step: `stats`, the forward's mean and variance
(`torch.var_mean` over N, H, W in float32: a split Welford), and `sums`, the backward's
sums of dy and of dy * (x - mean). Each compiled by torch.compile and by ember (Triton),
timed with `triton.testing.do_bench` (L2 flushed between calls: the GPU time of the whole
function, both halves of a split), with the bandwidth of reading the maps once.

With the sweep (default on), ember's first (largest) reduction kernel is launched again in
other launch configurations: the r-loop's software-pipeline depth (`stages`, heuristics'
`COLUMN_LOOP_STAGES`) and the [XBLOCK, RBLOCK] tile and warps, so one run says which
configuration heuristics.py should choose; `--column-programs 512,2048` also times ember with
its column reductions split into other numbers of chunks (split_reduction's
`COLUMN_PROGRAMS`), `--persistent-limits 128` with chunks of ~100 rows in one [32, 128] tile
instead of looped (heuristics' `WIDE_COLUMN_ROWS`, 64: rows that fit a [64, 64] tile). About a minute for the default shapes on
an H100.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

DEFAULT_SHAPES = "256x56,512x28"
TILES = ((64, 32, 8), (64, 16, 8), (64, 8, 4), (128, 16, 8))
PERSISTENT_TILES = ((8, 4), (16, 4), (16, 8), (32, 8), (64, 8))


def stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.var_mean(x.float(), dim=(0, 2, 3), correction=0)


def sums(dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor) -> tuple[torch.Tensor, ...]:
    grad = dy.float()
    return grad.sum((0, 2, 3)), (grad * (x.float() - mean[:, None, None])).sum((0, 2, 3))


def _inputs(
    kind: str, batch: int, channels: int, size: int, device: str
) -> tuple[torch.Tensor, ...]:
    def feature_map() -> torch.Tensor:
        x = torch.randn(batch, channels, size, size, device=device, dtype=torch.bfloat16)
        return x.contiguous(memory_format=torch.channels_last)

    if kind == "stats":
        return (feature_map(),)
    return feature_map(), feature_map(), torch.randn(channels, device=device)


def _ember(
    fn: Callable[..., Any],
    inputs: tuple[torch.Tensor, ...],
    column_programs: int | None = None,
    persistent_limit: int | None = None,
) -> tuple[Any, str]:
    """ember's compiled function and the generated Triton module's source. `column_programs`:
    split column reductions for about this many programs instead of split_reduction's
    `COLUMN_PROGRAMS`; `persistent_limit`: the rows of a large column reduction up to this
    many are one tile instead of heuristics' `WIDE_COLUMN_ROWS` (both set for this compile
    only, in a fresh artifact cache)."""
    import ember.prims as prims
    from ember.inductor.codegen.triton import TritonBackend, heuristics
    from ember.inductor.lowering import split_reduction
    from ember.inductor.pipeline import compile_graph
    from ember.runtime import ArtifactCache

    graph = prims.trace(fn, *inputs)
    cache = ArtifactCache(Path(tempfile.mkdtemp(prefix="ember-colred-")))
    defaults = split_reduction.COLUMN_PROGRAMS, heuristics.WIDE_COLUMN_ROWS
    split_reduction.COLUMN_PROGRAMS = column_programs or defaults[0]
    heuristics.WIDE_COLUMN_ROWS = persistent_limit or defaults[1]
    try:
        compiled = compile_graph(graph, inputs, backend=TritonBackend(), cache=cache)
    finally:
        split_reduction.COLUMN_PROGRAMS, heuristics.WIDE_COLUMN_ROWS = defaults
    return compiled, compiled.module


def _import(source: str) -> Any:
    path = Path(tempfile.mkdtemp(prefix="ember-colred-src-")) / "kernels.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"colred_{abs(hash(source))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _first_stage(source: str) -> tuple[str, int, int | None]:
    """The reduction kernel over the most points: its name, xnumel and (looped) rnumel."""
    best: tuple[int, str, int, int | None] | None = None
    for part in source.split("\ndef ")[1:]:
        name = part.split("(")[0]
        header = part.split("\n")[0]
        if "RBLOCK" not in header:
            continue
        found_x = re.search(r"xnumel = (\d+)", part)
        found_r = re.search(r"rnumel = (\d+)", part)
        if found_x is None or found_r is None:
            continue
        xnumel, rnumel = int(found_x.group(1)), int(found_r.group(1))
        looped = "for roffset in" in part
        if best is None or xnumel * rnumel > best[0]:
            best = (xnumel * rnumel, name, xnumel, rnumel if looped else None)
    assert best is not None, "no reduction kernel"
    return best[1], best[2], best[3]


def _with_stages(source: str, stages: int) -> str:
    loop = r"for roffset in (?:tl\.)?range\(0, (\d+), RBLOCK(?:, num_stages=\d+)?\):"
    if stages > 1:
        header = rf"for roffset in tl.range(0, \1, RBLOCK, num_stages={stages}):"
    else:
        header = r"for roffset in range(0, \1, RBLOCK):"
    return re.sub(loop, header, source)


def _arguments(module: Any, name: str, sized: int, device: str) -> list[torch.Tensor]:
    """A buffer for each pointer of the kernel, `sized` elements of its type: every map and
    partial-sum array the kernel indexes fits (values do not matter for timing)."""
    types = {"*bf16": torch.bfloat16, "*fp16": torch.float16, "*fp32": torch.float32}
    signature = module.KERNELS[name]["signature"]
    return [torch.zeros(sized, device=device, dtype=types[kind]) for kind in signature.values()]


def _sweep(
    source: str, maps_numel: int, bench: Callable[[Callable[[], Any]], float], device: str
) -> list[str]:
    name, xnumel, rnumel = _first_stage(source)
    rows = [f"  first stage {name}: xnumel {xnumel}, rnumel {rnumel or 'persistent'}"]
    variants: list[tuple[int, int | None, int, int]]
    if rnumel is None:
        variants = [(x, None, w, 1) for x, w in PERSISTENT_TILES]
    else:
        variants = [(64, 32, 8, s) for s in (1, 2, 3, 4)]
        variants += [(x, r, w, 3) for x, r, w in TILES[1:]]
        variants.append((64, 16, 8, 4))
    modules: dict[int, Any] = {}
    timed: list[tuple[float, str]] = []
    arguments: list[torch.Tensor] = []
    for xblock, rblock, warps, stages in variants:
        module = modules.get(stages)
        if module is None:
            module = modules[stages] = _import(_with_stages(source, stages))
        kernel = getattr(module, name)
        arguments = arguments or _arguments(module, name, max(maps_numel, xnumel), device)
        if rblock is None:
            found = re.search(r"RBLOCK': (\d+)", str(module.KERNELS[name]["configs"][0]))
            rblock = int(found.group(1)) if found else 128
        grid = ((xnumel + xblock - 1) // xblock,)

        def launch(kernel: Any = kernel, arguments: list[torch.Tensor] = arguments,
                   xblock: int = xblock, rblock: int = rblock, warps: int = warps,
                   grid: tuple[int] = grid) -> None:  # fmt: skip
            kernel[grid](*arguments, XBLOCK=xblock, RBLOCK=rblock, num_warps=warps, num_stages=1)

        try:
            micros = bench(launch) * 1e3
            config = f"X{xblock:<4} R{rblock:<4} w{warps} stages {stages}"
            rows.append(f"    {config}: {micros:7.1f} us")
            timed.append((micros, config))
        except Exception as error:  # out of resources: say so and go on
            rows.append(f"    X{xblock} R{rblock} w{warps} stages {stages}: {type(error).__name__}")
    if timed:
        micros, config = min(timed)
        rows.append(f"    best: {config} ({timed[0][0] / micros:.2f}x the first line)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="CxHW,... (H = W)")
    parser.add_argument("--kinds", default="stats,sums")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument(
        "--column-programs",
        default="",
        help="also time ember with column reductions split for these program counts (512,2048)",
    )
    parser.add_argument(
        "--persistent-limits",
        default="",
        help="also time ember with column rows up to these counts in one tile (128: ~100 rows)",
    )
    # cpu: a smoke test under TRITON_INTERPRET=1 (torch.compile's C++, times meaningless)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    def bench(fn: Callable[[], Any]) -> float:
        if args.device != "cuda":
            started = time.perf_counter()
            fn()
            return (time.perf_counter() - started) * 1e3
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=10, rep=40))

    functions: dict[str, Callable[..., Any]] = {"stats": stats, "sums": sums}
    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"device {name}, torch {torch.__version__}")
    print("shape            kind   tc us  (TB/s)   ember us (TB/s)  ember/tc")
    sweeps: list[str] = []
    for shape in args.shapes.split(","):
        channels, size = (int(v) for v in shape.split("x"))
        for kind in args.kinds.split(","):
            inputs = _inputs(kind, args.batch, channels, size, args.device)
            fn = functions[kind]
            maps = [t for t in inputs if t.dim() == 4]
            read = sum(t.numel() * t.element_size() for t in maps)
            compiled_tc: Callable[..., Any] = torch.compile(fn, dynamic=False)
            compiled_ember, source = _ember(fn, inputs)
            times: dict[str, float] = {}
            runs = [("tc", compiled_tc), ("ember", compiled_ember)]
            for programs in filter(None, args.column_programs.split(",")):
                compiled = _ember(fn, inputs, column_programs=int(programs))[0]
                runs.append((f"ember split for {programs} programs", compiled))
            for limit in filter(None, args.persistent_limits.split(",")):
                compiled = _ember(fn, inputs, persistent_limit=int(limit))[0]
                runs.append((f"ember persistent up to {limit} rows", compiled))
            for label, run in runs:
                run(*inputs)
                times[label] = bench(functools.partial(run, *inputs)) * 1e3
            label = f"{args.batch}x{channels}x{size}x{size}"
            print(
                f"{label:16} {kind:5} {times['tc']:7.1f} ({read / times['tc'] / 1e6:4.2f})"
                f" {times['ember']:8.1f} ({read / times['ember'] / 1e6:4.2f})"
                f"  {times['ember'] / times['tc']:5.2f}x",
                flush=True,
            )
            for run_label, micros in list(times.items())[2:]:
                print(f"    {run_label}: {micros:7.1f} us")
            if not args.no_sweep:
                sweeps.append(f"{label} {kind}")
                sweeps += _sweep(source, maps[0].numel(), bench, args.device)
    if sweeps:
        print("\nember's first-stage kernel in other launch configurations:")
        print("\n".join(sweeps))


if __name__ == "__main__":
    main()
