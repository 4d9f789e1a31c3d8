"""GEMM templates on the GPU (issue 18): ember's Triton template vs cuBLAS vs torch.compile,
and the model suite under max-autotune.

For each bf16 shape (M, N, K) it compiles `a @ b` with ember-inductor's GEMM templates on
(`mode="max-autotune"`'s settings, through `compile_graph`), lets the first call autotune
the template's block configurations (pointer and, on sm90, TMA and persistent variants) and
choose between the template and cuBLAS, then times, in two interleaved rounds, the way the
choice itself times (`ember.inductor.templates.timing.replay_time_ms`: CUDA-graph replay,
each call after an L2 flush): the template's best configuration, the vendor path ember
measured against (cuBLAS), plain `torch.mm` and the compiled call, and where time allows
torch.compile `mode="max-autotune-no-cudagraphs"`. Then `gelu(linear(x, w, b))` with its
epilogue fused into the template vs the vendor path (cuBLAS addmm, then the epilogue as its
own kernel), `ember.compile(mode="max-autotune")` of a small bf16 MLP against eager
(values), and channels-last 3x3 convolutions with bias and ReLU (the implicit-GEMM template
fused vs cuDNN and the epilogue kernel).

`--suite hf_gpt2,hf_resnet` then runs models of the 5-model suite (`--size gpu`, bf16
autocast, `--modes inference[,training]`) under ember `mode="max-autotune"` and
torch.compile `mode="max-autotune"`, each in its own process, one after the other: eager
and compiled step time (CUDA events over back-to-back steps), the first call's time
(compile and autotuning), ember's choices (template or cuBLAS) and the values against eager.

    python -m benchmarks.gemm_templates --out OUT [--budget 200] [--smoke] [--suite MODELS]
        [--only epilogue]

`--smoke` runs tiny float32 shapes on the CPU under TRITON_INTERPRET=1 (the script's own
check; with `--suite`, small models). Writes OUT/gemm.jsonl and prints one line a
measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import subprocess
import sys
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
SPLIT = ((1024, 1024, 8192), (512, 512, 16384))  # short grids, long K: split-K's shapes
TORCH_COMPILE_SHAPES = ((4096, 3072, 768), (2048, 2048, 2048), (4096, 4096, 4096))


def timed(fn: Callable[[], Any], smoke: bool) -> float:
    """Milliseconds of one `fn()`: as ember's choice times (GPU), or wall time (--smoke)."""
    if smoke:
        started = time.perf_counter()
        fn()
        return (time.perf_counter() - started) * 1e3
    from ember.inductor.templates.timing import replay_time_ms

    return replay_time_ms(fn)


def interleaved(
    fns: dict[str, Callable[[], Any]], smoke: bool, rounds: int = 2
) -> dict[str, float]:
    """Median milliseconds of each of `fns`, timed in turn `rounds` times (drift hits all)."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(timed(fn, smoke))
    return {name: statistics.median(times) for name, times in samples.items()}


class ChoiceLog(logging.Handler):
    """Keeps the `autotune` topic's messages: which configuration and path each choice took."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def since(self, start: int, kernel: str) -> list[str]:
        return [m for m in self.messages[start:] if m.startswith(kernel)]


CHOICES = ChoiceLog()


def describe_choice(messages: list[str]) -> dict[str, Any]:
    """The template configuration autotuning chose, and the template/vendor timings."""
    record: dict[str, Any] = {}
    for message in messages:
        if "ms, vendor" in message:
            record["choice_timing"] = message.split(": ", 1)[-1]
        elif "->" in message:
            record["template_config"] = message.rsplit("->", 1)[1].strip()
    return record


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
    mark = len(CHOICES.messages)
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
    record.update(describe_choice(CHOICES.since(mark, choice.name)))
    times = interleaved(
        {
            "template": lambda: choice.run_template(numel, *args),
            "vendor": lambda: choice.vendor(numel, *args),
            "cublas": lambda: torch.mm(a, b),
            "ember": lambda: compiled(a, b),
        },
        smoke,
    )
    for key, ms in times.items():
        record[f"{key}_ms"] = ms
    best = min(record["template_ms"], record["vendor_ms"])
    record["ember_best_vs_cublas"] = round(record["cublas_ms"] / best, 3)
    record["ember_vs_cublas"] = round(record["cublas_ms"] / record["ember_ms"], 3)
    record["template_vs_cublas"] = round(record["cublas_ms"] / record["template_ms"], 3)
    for key in ("template", "cublas", "ember"):
        record[f"{key}_tflops"] = round(tflops(m, n, k, record[f"{key}_ms"]), 1)
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
    # the same product without the epilogue (addmm alone), as a template: the fused kernel's floor
    alone = compile_templates(lambda x, w, bias: torch.addmm(bias, x, w.t()), (x, w, bias))
    alone(x, w, bias)
    (product,) = choices_of(alone)
    p_numel, p_args = bound_call(product, alone, (x, w, bias))
    record: dict[str, Any] = {"case": "linear+bias+gelu", "m": m, "n": n, "k": k,
                              "fused_kernels": compiled.kernel_count, "chosen": choice.chosen}  # fmt: skip
    record["max_abs_err"] = float((out.float() - expected.float()).abs().max().item())
    times = interleaved(
        {
            "fused_template_ms": lambda: choice.run_template(numel, *args),
            "unfused_cublas_plus_epilogue_ms": lambda: choice.vendor(numel, *args),
            "cublas_addmm_only_ms": lambda: torch.addmm(bias, x, w.t()),
            "template_product_only_ms": lambda: product.run_template(p_numel, *p_args),
            "eager_ms": lambda: fn(x, w, bias),
            "ember_ms": lambda: compiled(x, w, bias),
        },
        smoke,
    )
    record.update(times)
    # the epilogue's own memory round trip: what the unfused path adds to the product
    record["epilogue_saved_ms"] = (
        record["unfused_cublas_plus_epilogue_ms"] - record["fused_template_ms"]
    )
    # what the fused GELU adds to the template's product (0: the epilogue is free)
    record["fused_epilogue_cost_ms"] = (
        record["fused_template_ms"] - record["template_product_only_ms"]
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
    times = interleaved(
        {
            "fused_template_ms": lambda: choice.run_template(numel, *args),
            "unfused_cudnn_plus_epilogue_ms": lambda: choice.vendor(numel, *args),
            "eager_ms": lambda: fn(x, w, bias),
        },
        smoke,
    )
    record.update(times)
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


def suite_worker(model: str, mode: str, backend: str, smoke: bool) -> dict[str, Any]:
    """One model, mode and compiler (in its own process): eager and compiled step times, the
    first call's time (compile and autotuning), ember's choices, values against eager."""
    import ember
    from benchmarks.models import build_workload, spec
    from ember.inductor.backend import inductor

    device = "cpu" if smoke else "cuda"
    workload = build_workload(spec(model), "small" if smoke else "gpu", mode)
    module = workload.module.to(device)
    inputs = tuple(t.to(device) for t in workload.inputs)
    training = mode == "training"

    def step(run: Callable[..., Any]) -> torch.Tensor:
        with torch.enable_grad() if training else torch.no_grad():
            with torch.autocast(device, dtype=torch.bfloat16):
                out = run(*inputs)
            if training:
                out.backward()
        return out.detach().float()

    def step_ms(run: Callable[..., Any], steps: int = 2 if smoke else 10) -> float:
        for _ in range(3):
            step(run)
        if smoke:
            started = time.perf_counter()
            step(run)
            return (time.perf_counter() - started) * 1e3
        windows = []
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                step(run)
            end.record()
            end.synchronize()
            windows.append(start.elapsed_time(end) / steps)
        return statistics.median(windows)

    record: dict[str, Any] = {"case": "suite", "model": model, "mode": mode, "backend": backend}
    expected = step(module)
    record["eager_ms"] = step_ms(module)
    if backend == "ember":
        compile_mode = "max-autotune-no-cudagraphs" if smoke else "max-autotune"
        run = ember.compile(module, backend=inductor, mode=compile_mode)
    else:
        run = torch.compile(module, mode="max-autotune")
    started = time.perf_counter()
    out = step(run)
    if not smoke:
        torch.cuda.synchronize()
    record["first_call_s"] = round(time.perf_counter() - started, 1)
    record["compiled_ms"] = step_ms(run)
    record["speedup"] = round(record["eager_ms"] / record["compiled_ms"], 3)
    scale = float(expected.abs().max().item()) or 1.0
    record["max_rel_err"] = float((out - expected).abs().max().item()) / scale
    if backend == "ember":
        chosen = [m.rsplit("-> ", 1)[-1] for m in CHOICES.messages if "ms, vendor" in m]
        record["templates_chosen"] = chosen.count("template")
        record["vendor_chosen"] = chosen.count("vendor")
    return record


def canary(device: str = "cuda", rows: int = 2048) -> dict[str, Any]:
    """Every TMA and split-K configuration of a few bf16 products (a transposed weight with
    bias and GELU, row-major operands, a short grid with a long K) run once against eager,
    in a process of its own: a fault there must not take the sweep's CUDA context with it."""
    import triton

    from ember.runtime import LaunchConfig, TritonKernel

    triton.set_allocator(
        lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda")
    )
    record: dict[str, Any] = {"case": "canary", "ran": {"TMA": 0, "SPLIT_K": 0}, "errors": []}
    x = torch.randn(rows, rows // 2, device=device, dtype=torch.bfloat16)
    w = torch.randn(rows + 256, rows // 2, device=device, dtype=torch.bfloat16) / 32
    bias = torch.randn(rows + 256, device=device, dtype=torch.bfloat16)
    long_a = torch.randn(rows // 4, rows * 8, device=device, dtype=torch.bfloat16) / 64
    long_b = torch.randn(rows * 8, rows // 4, device=device, dtype=torch.bfloat16) / 64
    cases = (
        (lambda x, w, bias: F.gelu(F.linear(x, w, bias)), (x, w, bias)),
        (lambda x, w, bias: x @ w.t().contiguous() + bias, (x, w, bias)),
        (lambda a, b: torch.relu(a @ b), (long_a, long_b)),
    )
    failed: set[str] = set()
    for fn, inputs in cases:
        compiled = compile_templates(fn, inputs)
        (choice,) = choices_of(compiled)  # launched only with the configuration set below
        expected = fn(*inputs).float()
        template = choice.template
        for config in template.configs:
            constants = dict(config.constants)
            kind = (
                "TMA" if constants.get("TMA") else "SPLIT_K" if constants["SPLIT_K"] > 1 else None
            )
            if kind is None:
                continue
            kernel = TritonKernel(template.module, template.name, signature=dict(template.signature),
                                  configs=[LaunchConfig(config.constants, config.num_warps, config.num_stages)],
                                  grid_block="XBLOCK")  # fmt: skip
            choice.launch = partial(_launch_with, kernel, choice)
            try:
                for _ in range(2):  # twice: split-K's counters must be back at zero
                    out = compiled(*inputs).float()
                    error = float(((out - expected).abs().max() / expected.abs().max()).item())
                    if error > 2e-2:
                        record["errors"].append(f"{config.describe()}: relative error {error:.3g}")
                        failed.add(kind)
                record["ran"][kind] += 1
            except Exception as failure:  # a config that does not build: the autotuner skips it
                record["errors"].append(
                    f"{config.describe()}: {type(failure).__name__}: {failure}"[:300]
                )
    for kind in ("TMA", "SPLIT_K"):
        record[f"{kind}_ok"] = record["ran"][kind] > 0 and kind not in failed
    return record


def _launch_with(kernel: Any, choice: Any, numel: int, *args: Any) -> None:
    kernel(numel, *choice.template_arguments(args))


def run_suite(
    models: list[str], modes: list[str], deadline: float, smoke: bool,
    emit: Callable[[dict[str, Any]], None],
) -> None:  # fmt: skip
    """Each (model, mode, backend) in a process of its own, one at a time, until `deadline`."""
    backends = ["ember"] if smoke else ["ember", "torch.compile"]
    for mode in modes:
        for model in models:
            for backend in backends:
                left = deadline - time.perf_counter()
                case = {"case": "suite", "model": model, "mode": mode, "backend": backend}
                if left < 20:
                    emit({**case, "skipped": "time"})
                    continue
                command = [sys.executable, "-m", "benchmarks.gemm_templates",
                           "--worker", f"{model}:{mode}:{backend}", *(["--smoke"] if smoke else [])]  # fmt: skip
                # ember.compile applies EMBER_LOGS to its log topics (off unless named): name
                # autotune, or the worker's count of ember's choices reads nothing
                topics = ",".join(t for t in (os.environ.get("EMBER_LOGS", ""), "autotune") if t)
                environment = {**os.environ, "EMBER_LOGS": topics}
                try:
                    done = subprocess.run(
                        command, capture_output=True, text=True, timeout=left, env=environment
                    )
                except subprocess.TimeoutExpired:
                    emit({**case, "timeout_s": round(left, 1)})
                    continue
                lines = done.stdout.strip().splitlines()
                try:
                    emit(json.loads(lines[-1]))
                except (IndexError, ValueError):
                    emit({**case, "error": f"exit {done.returncode}: {done.stderr[-800:]}"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/gemm")
    parser.add_argument("--budget", type=float, default=200.0)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--suite", default="", help="models, e.g. hf_gpt2,hf_resnet")
    parser.add_argument("--modes", default="inference")
    parser.add_argument("--sweep-budget", type=float, default=None,
                        help="seconds for the GEMM cases before the suite (default: all)")  # fmt: skip
    parser.add_argument("--only", default="",
                        help="run only these GEMM cases, e.g. epilogue (of gemm, epilogue, "
                        "torch.compile, mlp, conv; default: all)")  # fmt: skip
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)  # model:mode:backend
    options = parser.parse_args()
    from ember.prims.logs import topic_logger

    autotune = topic_logger("autotune")  # every timing and choice
    autotune.setLevel(logging.INFO)
    autotune.addHandler(CHOICES)
    if options.worker == "canary":
        print(json.dumps(canary()), flush=True)
        return
    if options.worker:
        model, mode, backend = options.worker.split(":")
        try:
            record = suite_worker(model, mode, backend, options.smoke)
        except Exception as error:
            traceback.print_exc()
            record = {"case": "suite", "model": model, "mode": mode, "backend": backend,
                      "error": f"{type(error).__name__}: {error}"[:500]}  # fmt: skip
        print(json.dumps(record), flush=True)
        return
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    autotune.addHandler(logging.FileHandler(out / "autotune.log"))
    sweep_end = started + (options.sweep_budget or options.budget)
    if options.smoke:
        device, dtype = "cpu", torch.float32
        shapes: list[tuple[int, int, int]] = [(33, 20, 17)]
        epilogues = [(40, 24, 16)]
        convolutions = [(2, 5, 7, 6)]
    else:
        device, dtype = "cuda", torch.bfloat16
        shapes = [(s, s, s) for s in SQUARE] + list(TRANSFORMER) + list(SPLIT)
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

    only = {case for case in options.only.split(",") if case}

    def attempt(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        if only and name.split()[0] not in only:
            return
        if time.perf_counter() > sweep_end:
            emit({"case": name, "skipped": "time"})
            return
        try:
            emit(fn())
        except Exception as error:
            emit({"case": name, "error": f"{type(error).__name__}: {error}"[:500]})
            traceback.print_exc()

    if not options.smoke:  # TMA and split-K kernels first, alone (a fault stays there)
        from ember.inductor.templates import configs

        command = [sys.executable, "-m", "benchmarks.gemm_templates", "--worker", "canary"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            checked = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError, subprocess.TimeoutExpired) as error:
            checked = {"case": "canary", "error": f"{type(error).__name__}: {error}"[-800:]}
        emit(checked)
        if not checked.get("TMA_ok"):  # the sweep without TMA configurations
            configs.TMA_MIN_OUTPUT = 1 << 62
        if not checked.get("SPLIT_K_ok"):  # nor split-K ones
            configs.SPLIT_TILE_AREA = 1 << 62
    for m, n, k in shapes:
        attempt(f"gemm {m}x{n}x{k}", partial(gemm_case, m, n, k, dtype, device, options.smoke))
    m, n, k = epilogues[0]
    attempt("epilogue", partial(epilogue_case, m, n, k, dtype, device, options.smoke))
    if not options.smoke:
        for m, n, k in TORCH_COMPILE_SHAPES:
            attempt("torch.compile", partial(torch_compile_case, m, n, k, dtype))
    attempt("mlp", lambda: mlp_case(device, options.smoke))
    models = [m for m in options.suite.split(",") if m]
    modes = [m for m in options.modes.split(",") if m]
    # the suite's first model and mode, then the rest of the GEMM cases, then the other models
    if models:
        run_suite(models[:1], modes[:1], started + options.budget, options.smoke, emit)
    sweep_end = started + options.budget - 30  # what is left of the budget
    for m, n, k in epilogues[1:]:
        attempt("epilogue", partial(epilogue_case, m, n, k, dtype, device, options.smoke))
    for n, c, hw, cout in convolutions:
        attempt("conv", partial(conv_case, n, c, hw, cout, dtype, device, options.smoke))
    rest = [(model, mode) for mode in modes for model in models][1:]
    for model, mode in rest:
        run_suite([model], [mode], started + options.budget, options.smoke, emit)


if __name__ == "__main__":
    main()
