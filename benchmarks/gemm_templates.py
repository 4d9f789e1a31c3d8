"""GEMM templates on the GPU (issue 18): ember's Triton template vs cuBLAS vs torch.compile.

For each bf16 shape (M, N, K) it compiles `a @ b` with ember-inductor's GEMM templates on
(`mode="max-autotune"`'s settings, through `compile_graph`), lets the first call autotune
the template's block configurations and choose between the template and cuBLAS, then times
by CUDA-graph replay (20 calls a graph, median of 15 replays, so no launch overhead counts):
the template's best configuration, the vendor path ember measured against (cuBLAS), plain
`torch.mm`, and where time allows torch.compile `mode="max-autotune-no-cudagraphs"`. Then
`gelu(linear(x, w, b))` with its epilogue fused into the template vs the vendor path
(cuBLAS addmm, then the epilogue as its own kernel), `ember.compile(mode="max-autotune")`
of a small bf16 MLP against eager (values), and channels-last 3x3 convolutions with bias and
ReLU (the implicit-GEMM template fused vs cuDNN and the epilogue kernel).

    python -m benchmarks.gemm_templates --out OUT [--budget 200] [--smoke]

`--smoke` runs tiny float32 shapes on the CPU under TRITON_INTERPRET=1 (the script's own
check). Writes OUT/gemm.jsonl and prints one line a measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

SQUARE = (256, 512, 1024, 2048, 4096, 8192)
TRANSFORMER = (  # (M, N, K): GPT-2 small at 4096 tokens, Llama-7B MLP at 2048 tokens
    (4096, 2304, 768),
    (4096, 3072, 768),
    (4096, 768, 3072),
    (2048, 11008, 4096),
    (2048, 4096, 11008),
)
TORCH_COMPILE_SHAPES = ((4096, 3072, 768), (2048, 2048, 2048), (4096, 4096, 4096))


def graph_time_ms(fn: Callable[[], Any], calls: int = 20, replays: int = 15) -> float:
    """Median milliseconds of one `fn()` by CUDA-graph replay (launch overhead excluded)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls)
    return statistics.median(samples)


def event_time_ms(fn: Callable[[], Any], calls: int = 20, replays: int = 10) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls)
    return statistics.median(samples)


def timed(fn: Callable[[], Any], smoke: bool) -> float:
    if smoke:
        started = time.perf_counter()
        fn()
        return (time.perf_counter() - started) * 1e3
    try:
        return graph_time_ms(fn)
    except Exception:  # a path that cannot be captured: events (launch overhead included)
        return event_time_ms(fn)


def compile_templates(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> Any:
    """`fn` compiled by ember-inductor with GEMM templates and autotuning on."""
    import ember.prims as prims
    from ember.inductor.config import InductorConfig
    from ember.inductor.pipeline import compile_graph
    from ember.prims.config import load

    config = dataclasses.replace(load(InductorConfig), max_autotune=True, gemm_templates=True)
    backend = None
    if inputs[0].device.type == "cpu":  # --smoke: the Triton kernels, interpreted
        from ember.inductor.codegen.triton import TritonBackend

        backend = TritonBackend(max_autotune=True)
    return compile_graph(prims.trace(fn, *inputs), inputs, config=config, backend=backend)


def choices_of(compiled: Any) -> list[Any]:
    from ember.inductor.templates.gemm_choice import GemmChoice

    kernels = compiled.call.__globals__["kernels"]
    return [k for k in kernels.values() if isinstance(k, GemmChoice)]


def bound_call(choice: Any, compiled: Any, inputs: tuple[torch.Tensor, ...]) -> tuple[int, tuple[Any, ...]]:  # fmt: skip
    """The (numel, storages) the compiled wrapper passes `choice` for `inputs`."""
    seen: list[tuple[int, tuple[Any, ...]]] = []
    launch = choice.launch
    choice.launch = lambda numel, *args: (seen.append((numel, args)), launch(numel, *args))
    compiled(*inputs)
    choice.launch = launch
    return seen[0]


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2 * m * n * k / (ms * 1e-3) / 1e12


def gemm_case(m: int, n: int, k: int, dtype: torch.dtype, device: str, smoke: bool) -> dict[str, Any]:  # fmt: skip
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    record: dict[str, Any] = {"case": "gemm", "m": m, "n": n, "k": k, "dtype": str(dtype)}
    started = time.perf_counter()
    compiled = compile_templates(lambda x, y: x @ y, (a, b))
    out = compiled(a, b)
    if device == "cuda":
        torch.cuda.synchronize()
    record["ember_first_call_s"] = round(time.perf_counter() - started, 2)
    expected = a @ b
    record["max_rel_err"] = float(((out.float() - expected.float()).abs().max() /
                                   expected.float().abs().max()).item())  # fmt: skip
    (choice,) = choices_of(compiled)
    numel, args = bound_call(choice, compiled, (a, b))
    record["chosen"] = choice.chosen
    record["template_ms"] = timed(lambda: choice.template(numel, *args), smoke)
    record["vendor_ms"] = timed(lambda: choice.vendor(numel, *args), smoke)
    record["cublas_ms"] = timed(lambda: torch.mm(a, b), smoke)
    record["ember_ms"] = timed(lambda: compiled(a, b), smoke)
    best = min(record["template_ms"], record["vendor_ms"])
    record["ember_best_vs_cublas"] = round(record["cublas_ms"] / best, 3)
    record["template_vs_cublas"] = round(record["cublas_ms"] / record["template_ms"], 3)
    for key in ("template", "cublas", "ember"):
        record[f"{key}_tflops"] = round(tflops(m, n, k, record[f"{key}_ms"]), 1)
    if not smoke:
        config = getattr(choice.template, "_tuned", {})
        record["template_launches"] = len(config)
    return record


def torch_compile_case(m: int, n: int, k: int, dtype: torch.dtype) -> dict[str, Any]:
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    torch._dynamo.reset()
    fn = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs")
    started = time.perf_counter()
    fn(a, b)
    torch.cuda.synchronize()
    first = time.perf_counter() - started
    ms = timed(lambda: fn(a, b), False)
    return {"case": "torch.compile max-autotune", "m": m, "n": n, "k": k, "ms": ms,
            "tflops": round(tflops(m, n, k, ms), 1), "first_call_s": round(first, 1)}  # fmt: skip


def epilogue_case(m: int, n: int, k: int, dtype: torch.dtype, device: str, smoke: bool) -> dict[str, Any]:  # fmt: skip
    x = torch.randn(m, k, device=device, dtype=dtype)
    w = torch.randn(n, k, device=device, dtype=dtype) / k**0.5
    bias = torch.randn(n, device=device, dtype=dtype)

    def fn(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.linear(x, w, bias))

    compiled = compile_templates(fn, (x, w, bias))
    out = compiled(x, w, bias)
    expected = fn(x, w, bias)
    (choice,) = choices_of(compiled)
    numel, args = bound_call(choice, compiled, (x, w, bias))
    record: dict[str, Any] = {"case": "linear+bias+gelu", "m": m, "n": n, "k": k,
                              "fused_kernels": compiled.kernel_count, "chosen": choice.chosen}  # fmt: skip
    record["max_abs_err"] = float((out.float() - expected.float()).abs().max().item())
    record["fused_template_ms"] = timed(lambda: choice.template(numel, *args), smoke)
    record["unfused_cublas_plus_epilogue_ms"] = timed(lambda: choice.vendor(numel, *args), smoke)
    record["cublas_addmm_only_ms"] = timed(lambda: torch.addmm(bias, x, w.t()), smoke)
    record["eager_ms"] = timed(lambda: fn(x, w, bias), smoke)
    record["ember_ms"] = timed(lambda: compiled(x, w, bias), smoke)
    # the epilogue's own memory round trip: what the unfused path adds to the product
    record["epilogue_saved_ms"] = (
        record["unfused_cublas_plus_epilogue_ms"] - record["fused_template_ms"]
    )
    return record


def conv_case(
    n: int, c: int, hw: int, cout: int, dtype: torch.dtype, device: str, smoke: bool
) -> dict[str, Any]:
    """A channels-last 3x3 convolution with bias and ReLU: the implicit-GEMM template with the
    epilogue fused vs cuDNN and the epilogue kernel, eager beside them."""
    x = torch.randn(n, c, hw, hw, device=device, dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(cout, c, 3, 3, device=device, dtype=dtype) / (9 * c) ** 0.5
    w = w.contiguous(memory_format=torch.channels_last)
    bias = torch.randn(cout, device=device, dtype=dtype)

    def fn(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.relu(F.conv2d(x, w, bias, padding=1))

    compiled = compile_templates(fn, (x, w, bias))
    out = compiled(x, w, bias)
    expected = fn(x, w, bias)
    (choice,) = choices_of(compiled)
    numel, args = bound_call(choice, compiled, (x, w, bias))
    flops = 2 * n * hw * hw * cout * c * 9
    record: dict[str, Any] = {"case": "conv3x3+bias+relu channels-last", "n": n, "c": c,
                              "hw": hw, "cout": cout, "chosen": choice.chosen}  # fmt: skip
    record["max_abs_err"] = float((out.float() - expected.float()).abs().max().item())
    record["fused_template_ms"] = timed(lambda: choice.template(numel, *args), smoke)
    record["unfused_cudnn_plus_epilogue_ms"] = timed(lambda: choice.vendor(numel, *args), smoke)
    record["eager_ms"] = timed(lambda: fn(x, w, bias), smoke)
    record["template_tflops"] = round(flops / (record["fused_template_ms"] * 1e-3) / 1e12, 1)
    return record


def mlp_case(device: str, smoke: bool) -> dict[str, Any]:
    """ember.compile(mode="max-autotune") end to end (capture, CUDA graphs, templates)."""
    import ember
    from ember.inductor.backend import inductor

    dtype = torch.float32 if smoke else torch.bfloat16
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
    ).to(device=device, dtype=dtype)
    x = torch.randn(512, 256, device=device, dtype=dtype)
    mode = "max-autotune-no-cudagraphs" if smoke else "max-autotune"
    compiled = ember.compile(model, backend=inductor, mode=mode)
    with torch.no_grad():
        expected = model(x)
        for _ in range(3):
            out = compiled(x)
    error = float((out.float() - expected.float()).abs().max().item())
    return {"case": f"ember.compile mode={mode} MLP", "max_abs_err": error}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/gemm")
    parser.add_argument("--budget", type=float, default=200.0)
    parser.add_argument("--smoke", action="store_true")
    options = parser.parse_args()
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    from ember.prims.logs import topic_logger

    autotune = topic_logger("autotune")  # every timing and choice, to a file
    autotune.setLevel(logging.INFO)
    autotune.addHandler(logging.FileHandler(out / "autotune.log"))
    if options.smoke:
        device, dtype = "cpu", torch.float32
        shapes: list[tuple[int, int, int]] = [(33, 20, 17)]
        epilogues = [(40, 24, 16)]
        convolutions = [(2, 5, 7, 6)]
    else:
        device, dtype = "cuda", torch.bfloat16
        shapes = [(s, s, s) for s in SQUARE] + list(TRANSFORMER)
        epilogues = [(4096, 3072, 768), (8192, 3072, 768)]
        convolutions = [(32, 64, 56, 64), (32, 256, 14, 256)]  # ResNet-50 stages 1 and 3
        print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    results = out / "gemm.jsonl"

    def emit(record: dict[str, Any]) -> None:
        record["elapsed_s"] = round(time.perf_counter() - started, 1)
        with results.open("a") as file:
            file.write(json.dumps(record) + "\n")
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                          for k, v in record.items()}), flush=True)  # fmt: skip

    def attempt(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        try:
            emit(fn())
        except Exception as error:
            emit({"case": name, "error": f"{type(error).__name__}: {error}"[:500]})
            traceback.print_exc()

    for m, n, k in shapes:
        attempt(f"gemm {m}x{n}x{k}", partial(gemm_case, m, n, k, dtype, device, options.smoke))
    m, n, k = epilogues[0]
    attempt("epilogue", partial(epilogue_case, m, n, k, dtype, device, options.smoke))
    attempt("mlp", lambda: mlp_case(device, options.smoke))
    if not options.smoke:
        for m, n, k in TORCH_COMPILE_SHAPES:
            if time.perf_counter() - started > options.budget * 0.75:
                emit({"case": "torch.compile max-autotune", "skipped": f"{m}x{n}x{k}: time"})
                continue
            attempt("torch.compile", partial(torch_compile_case, m, n, k, dtype))
    for m, n, k in epilogues[1:]:
        attempt("epilogue", partial(epilogue_case, m, n, k, dtype, device, options.smoke))
    for n, c, hw, cout in convolutions:
        attempt("conv", partial(conv_case, n, c, hw, cout, dtype, device, options.smoke))


if __name__ == "__main__":
    main()
