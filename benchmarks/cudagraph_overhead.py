"""Per-call overhead and CUDA graph trees: ember next to eager and torch.compile.

    python -m benchmarks.cudagraph_overhead gpt2 [--json PATH]
    python -m benchmarks.cudagraph_overhead train --model hf_gpt2 [--size small] [--json PATH]
    python -m benchmarks.cudagraph_overhead profile --model hf_gpt2 [--size small] [--json PATH]
    python -m benchmarks.cudagraph_overhead host [--layers 12] [--json PATH]
    python -m benchmarks.cudagraph_overhead tree [--json PATH]
    python -m benchmarks.cudagraph_overhead suite --size gpu [--out DIR] [--deadline 270]
    python -m benchmarks.cudagraph_overhead externs

`gpt2`: GPT-2 small at batch 1 x 64 tokens, inference under bf16 autocast, in one process:
eager, torch.compile default and reduce-overhead, ember default and reduce-overhead. Each is
warmed up, then timed two ways: `throughput_ms` (200 steps back to back, one synchronize;
what a serving loop sees) and `latency_ms` (median of steps each followed by a synchronize).
`train`: training steps (forward, backward, SGD) of one suite model with reduce-overhead:
ember and torch.compile against eager (loss and gradients after the steps) and the peak
memory of the steps after warm-up. `profile`: default mode, wall time per step against the
GPU kernel time the torch profiler records, and device-to-device copies per step.
`host` (no GPU needed): the host (Python) cost of one reduce-overhead call of GPT-2 small
1 x 64 on the CPU, split into capture's guards, the entry function, the compiled graph's
binding and the CUDA graph tree (recorded with a recorder whose replay does nothing), next to
torch.compile's guards and dispatch (a backend that returns fixed outputs).
`tree` (no GPU needed): the tree alone, one graph with 150 static inputs, one copied input
and 26 outputs (GPT-2's shape when it was 3 graphs), on the same do-nothing recorder.
`suite`: the issue's "Done when" on the 5-model suite (`--models`, default ResNet-50, ViT-B/16,
GPT-2, BERT, Llama-style at `--size gpu`), inference and training, bf16 autocast, in worker
processes that compile in parallel and measure one at a time: default mode, ember and
torch.compile: wall per step (back to back, one synchronize) against the GPU time the
profiler records (kernels, memcpy, memset), launches, device-to-device memcpys and copy
kernels per step, and (ember) where the host time goes; reduce-overhead, eager, ember and
torch.compile: outputs or gradients (after SGD steps) against eager's and peak memory
(`max_memory_allocated` above the model, graph pools included). Rows go to
`DIR/results.jsonl` as they come; `DIR/summary.md` holds the tables and the check of each item.
Training's reduce-overhead part runs one worker per compiler (each with eager's reference).
`--device cpu --size small` tries the script without a GPU.
`externs`: the host microseconds a call of the suite's extern ops at its shapes (bf16).
The suite and its workers live in `benchmarks/cudagraph_suite.py`; this module holds the other
commands, the helpers they share with it, the device (`DEVICE`) and the command line.
Needs CUDA except `host`, `tree` and `suite --device cpu`; not part of CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for source in ("src", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "packages").glob("*/src"))):
    if str(ROOT / source) not in sys.path:
        sys.path.insert(0, str(ROOT / source))

import torch  # noqa: E402

DEVICE = torch.device("cuda")
if not torch.cuda.is_available() and ("host" in sys.argv or "tree" in sys.argv):
    DEVICE = torch.device("cpu")


def _ember_compile(
    module: torch.nn.Module, mode: str | None = None, options: dict[str, Any] | None = None
) -> Any:
    """ember.compile with ember-inductor passed by object (no installed entry point needed);
    `options` set InductorConfig fields (a setting measured beside the default)."""
    import ember
    from ember.inductor.backend import inductor

    return ember.compile(module, backend=inductor, mode=mode, options=options)


def _gpt2_inference() -> tuple[torch.nn.Module, torch.Tensor]:
    import transformers

    from benchmarks.models.workload import KeywordAdapter

    torch.manual_seed(0)
    config = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config._attn_implementation = "sdpa"
    gpt2 = transformers.GPT2LMHeadModel(config)
    model = KeywordAdapter(gpt2, ("input_ids",), "logits")
    tokens = torch.randint(0, config.vocab_size, (1, 64), device=DEVICE)
    return model.eval().to(DEVICE), tokens


def _time(step: Callable[[], Any], steps: int = 200) -> dict[str, float]:
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    throughput = (time.perf_counter() - start) / steps * 1e3
    samples = []
    for _ in range(50):
        begin = time.perf_counter()
        step()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - begin) * 1e3)
    return {"throughput_ms": throughput, "latency_ms": statistics.median(samples)}


def run_gpt2(only: str | None = None) -> dict[str, Any]:
    """`only`: comma-separated variant names (default: all). Logits are compared with a
    float32 eager reference; `err_over_eager_bf16` is a variant's max abs error over eager
    bf16's own (1 is as good as eager under autocast)."""
    model, tokens = _gpt2_inference()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16)
    builders: dict[str, Callable[[], Callable[..., Any]]] = {
        "eager": lambda: model,
        "torch.compile default": lambda: torch.compile(model),
        "torch.compile reduce-overhead": lambda: torch.compile(model, mode="reduce-overhead"),
        "ember default": lambda: _ember_compile(model),
        "ember reduce-overhead": lambda: _ember_compile(model, mode="reduce-overhead"),
    }
    wanted = only.split(",") if only else list(builders)
    variants = {name: builders[name]() for name in wanted}
    with torch.no_grad():
        reference = model(tokens).float()  # float32 eager
        with autocast:
            eager_bf16 = model(tokens).float()
    eager_error = (eager_bf16 - reference).abs().max().item()
    rows: dict[str, Any] = {"eager_bf16_max_abs_err_vs_fp32": eager_error}
    for name, fn in variants.items():
        row: dict[str, Any] = {}
        try:
            with torch.no_grad(), autocast:
                start = time.perf_counter()
                first = fn(tokens)
                torch.cuda.synchronize()
                row["first_call_s"] = time.perf_counter() - start
                row["max_abs_err_vs_fp32"] = (first.float() - reference).abs().max().item()
                row["max_abs_diff_vs_eager_bf16"] = (first.float() - eager_bf16).abs().max().item()
                row.update(_time(lambda fn=fn: fn(tokens)))
                out = fn(tokens).float()
                error = (out - reference).abs().max().item()
                row["max_abs_err_vs_fp32_steady"] = error
                row["err_over_eager_bf16"] = error / eager_error if eager_error else None
        except Exception as error:  # report and go on to the next variant
            row["error"] = f"{type(error).__name__}: {error}"[:2000]
        rows[name] = row
        print(name, row, flush=True)
    ours = rows.get("ember reduce-overhead", {}).get("throughput_ms")
    theirs = rows.get("torch.compile reduce-overhead", {}).get("throughput_ms")
    if ours and theirs:
        rows["ratio_throughput"] = ours / theirs
        rows["ratio_latency"] = (
            rows["ember reduce-overhead"]["latency_ms"]
            / rows["torch.compile reduce-overhead"]["latency_ms"]
        )
    if "ember reduce-overhead" in variants:
        ember_ro = variants["ember reduce-overhead"]
        rows["ember_tree"] = _tree_stats()
        rows["ember_host_us"] = _host_split(ember_ro, tokens)
        rows["ember_profile"] = _python_profile(lambda: ember_ro(tokens))
    return rows


def _host_split(compiled: Any, tokens: torch.Tensor) -> dict[str, float]:
    """Host time of one reduce-overhead call and of its guard check (no synchronize)."""
    from ember.capture.translate import FUNCTION_KEY

    state = type(compiled).forward._ember_compiled
    arguments = {"self": compiled, "inputs": (tokens,), FUNCTION_KEY: state.fn}
    entry = state.table.entries[0]
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        guards = _median_us(lambda: entry.check.check_inputs(arguments, state.globals), 2000)
        torch.cuda.synchronize()
    return {"guards_us": guards, "guard_count": len(entry.check.guards)}


def _python_profile(step: Callable[[], Any], steps: int = 100) -> list[str]:
    """The functions where a steady-state step spends its Python time (cProfile, tottime)."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        profiler.enable()
        for _ in range(steps):
            step()
        profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
    return text.getvalue().splitlines()


def _tree_stats() -> list[dict[str, int]]:
    from ember.runtime.cudagraphs import trees

    return [
        {"nodes": t.node_count(), "replays": t.replays, "eager_runs": t.eager_runs} for t in trees()
    ]


# ---- the device's synchronize and memory counters (none on the CPU) ---------------------------


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def _allocated() -> int:
    return torch.cuda.memory_allocated() if DEVICE.type == "cuda" else 0


def _reset_peak() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak() -> int:
    return torch.cuda.max_memory_allocated() if DEVICE.type == "cuda" else 0


def _workload(model: str, size: str, mode: str) -> Any:
    from benchmarks.models import huggingface

    builders = {spec.name: spec.build for spec in huggingface.SPECS}
    torch.manual_seed(0)
    workload = builders[model](size, mode)
    workload.module.to(DEVICE)
    workload.inputs = tuple(t.to(DEVICE) for t in workload.inputs)
    return workload


def _train_steps(
    model: str,
    size: str,
    compile_fn: Callable[[torch.nn.Module], Any] | None,
    steps: int,
    hold: Callable[[], Any] = contextlib.nullcontext,
) -> dict[str, Any]:
    workload = _workload(model, size, "training")
    module = workload.module
    _sync()
    if DEVICE.type == "cuda":
        torch.cuda.empty_cache()
    base = _allocated()
    _reset_peak()
    run = compile_fn(module) if compile_fn is not None else module
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)
    losses = []

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            loss = run(*workload.inputs)
        loss.backward()
        opt.step()
        losses.append(loss.detach().float().item())

    start = time.perf_counter()
    for _ in range(3):  # warm-up and recording
        step()
    _sync()
    warm_s = time.perf_counter() - start
    native = _guards_in_c() if compile_fn is not None else None
    warm_peak = _peak()
    _reset_peak()
    times = []
    with hold():
        for _ in range(steps):
            begin = time.perf_counter()
            step()
            _sync()
            times.append((time.perf_counter() - begin) * 1e3)
    peak = _peak()
    resident = _allocated()
    reserved_peak = torch.cuda.max_memory_reserved() if DEVICE.type == "cuda" else 0
    # gradients of one more step, for the comparison with eager
    opt.zero_grad(set_to_none=True)
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        loss = run(*workload.inputs)
    loss.backward()
    grads = [p.grad.detach().float().cpu() for p in module.parameters() if p.grad is not None]
    return {
        "losses": losses,
        "grads": grads,
        "warmup_s": warm_s,
        "step_ms": statistics.median(times),
        "peak_mb": (max(peak, warm_peak) - base) / 2**20,  # above the model and its inputs
        "steady_peak_mb": (peak - base) / 2**20,  # over the timed steps (pools included)
        "resident_mb": (resident - base) / 2**20,  # held between steps (pools included)
        "reserved_peak_mb": reserved_peak / 2**20,  # the caching allocator's, pools included
        "native_guards": native,
    }


def _release() -> None:
    """Free what a variant's compiler holds (graph pools included) before the next one."""
    import gc

    torch._dynamo.reset()  # benchmarks may reset the peer
    from ember.runtime.cudagraphs import reset_trees

    reset_trees()
    gc.collect()
    if DEVICE.type == "cuda":
        torch.cuda.empty_cache()


def _guards_in_c(timeout: float = 240.0) -> bool:
    """Wait, outside the measurement lock, until this process's C tensor guards are loaded or
    known to be unavailable, so that the measured steps check their guards as a warm machine
    does; True when they are in use. A fresh machine builds them once in the background
    (~30 s); until then every call runs the generated Python check, and a worker that the lock
    paused mid-build kept it: at 1c24e76 9 of the suite's 10 default-mode rows measured the
    Python check (ResNet-50 inference 0.92 ms a step under cProfile, the C check ~70 us)."""
    from ember.capture.guards.native import NATIVE

    return NATIVE.wait(timeout) is not None


def run_train(model: str, size: str, steps: int, only: str | None = None) -> dict[str, Any]:
    variants: dict[str, Callable[[torch.nn.Module], Any] | None] = {
        "eager": None,
        "torch.compile reduce-overhead": lambda m: torch.compile(m, mode="reduce-overhead"),
        "ember reduce-overhead": lambda m: _ember_compile(m, mode="reduce-overhead"),
    }
    if only:
        keep = ["eager", *only.split(",")]  # eager is the reference
        variants = {k: v for k, v in variants.items() if k in keep}
    results: dict[str, Any] = {"model": model, "size": size}
    reference: dict[str, Any] | None = None
    for name, compile_fn in variants.items():
        try:
            out = _train_steps(model, size, compile_fn, steps)
        except Exception as error:
            results[name] = {"error": f"{type(error).__name__}: {error}"[:2000]}
            print(name, results[name], flush=True)
            continue
        grads = out.pop("grads")
        if reference is None:
            reference = {"grads": grads, "losses": out["losses"]}
        else:
            diffs = [
                ((g - r).norm() / (r.norm() + 1e-12)).item()
                for g, r in zip(grads, reference["grads"])
            ]
            out["grad_rel_err_max"] = max(diffs) if diffs else None
            out["grad_count"] = (len(grads), len(reference["grads"]))
            out["loss_abs_diff_max"] = max(
                abs(a - b) for a, b in zip(out["losses"], reference["losses"])
            )
        if name.startswith("ember"):
            out["tree"] = _tree_stats()
        results[name] = out
        print(name, {k: v for k, v in out.items() if k != "losses"}, flush=True)
        _release()
    if "ember reduce-overhead" in results and "torch.compile reduce-overhead" in results:
        ours = results["ember reduce-overhead"].get("peak_mb")
        theirs = results["torch.compile reduce-overhead"].get("peak_mb")
        if ours and theirs:
            results["peak_ratio"] = ours / theirs
    return results


def run_profile(model: str, size: str, mode: str) -> dict[str, Any]:
    """Default mode: wall per step vs GPU kernel time per step (torch profiler), D2D copies."""
    from torch.profiler import ProfilerActivity, profile

    results: dict[str, Any] = {"model": model, "size": size, "mode": mode}
    for name, compile_fn in (("torch.compile", torch.compile), ("ember", _ember_compile)):
        workload = _workload(model, size, mode)
        run = compile_fn(workload.module)
        grad = torch.enable_grad() if mode == "training" else torch.no_grad()

        def step(run: Any = run, inputs: tuple = workload.inputs, grad: Any = grad) -> None:
            with grad, torch.autocast("cuda", dtype=torch.bfloat16):
                out = run(*inputs)
            if mode == "training":
                out.backward()

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        steps = 10
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            begin = time.perf_counter()
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - begin) / steps * 1e3
        kernel_us = 0.0
        copies = 0
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                kernel_us += event.device_time
                if "Memcpy DtoD" in event.name:
                    copies += 1
        begin = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        unprofiled = (time.perf_counter() - begin) / steps * 1e3
        results[name] = {
            "wall_ms": unprofiled,
            "wall_profiled_ms": wall,
            "gpu_kernel_ms": kernel_us / steps / 1e3,
            "dtod_copies_per_step": copies / steps,
        }
        results[name]["wall_over_gpu"] = unprofiled / results[name]["gpu_kernel_ms"]
        print(name, results[name], flush=True)
    return results


# ---- host cost of a reduce-overhead call, on the CPU ----------------------------------------


class _NoReplayRecording:
    def __init__(self, outputs: tuple[Any, ...]) -> None:
        self.outputs = outputs

    def replay(self) -> None:
        """A CUDA graph replay is one launch; here nothing, so only the host path is timed."""


class _NoReplayRecorder:
    """Records by running the graph once; replays do nothing; every tensor counts as on the
    device. What remains of a call is its host path: guards, binding, tree, hand-out."""

    def record(
        self, call: Callable[[list[Any]], Any], args: list[Any], reserve: int = 0
    ) -> _NoReplayRecording:
        return _NoReplayRecording(tuple(call(args)))

    def warm_up(self, reserve: int = 0) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()

    def storage_alias(self, owner: torch.Tensor) -> torch.UntypedStorage:
        storage = owner.untyped_storage()
        return torch._C._construct_storage_from_data_pointer(  # type: ignore[no-any-return]
            storage.data_ptr(), owner.device, storage.nbytes()
        )

    def invalidate(self, tensor: torch.Tensor, message: str) -> None:
        self.invalidated += 1  # CPU builds of torch have no storage access error

    def on_device(self, tensor: torch.Tensor) -> bool:
        return True

    invalidated = 0


def _median_us(step: Callable[[], Any], calls: int = 3000, rounds: int = 7) -> float:
    for _ in range(200):
        step()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls // rounds):
            step()
        samples.append((time.perf_counter() - start) / (calls // rounds) * 1e6)
    return statistics.median(samples)


def run_host(layers: int) -> dict[str, Any]:
    import transformers

    import ember
    from benchmarks.models.workload import KeywordAdapter
    from ember.inductor.backend import inductor
    from ember.runtime.cudagraphs import FunctionMode, set_recorder_factory, trees

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, n_layer=layers
    )
    config._attn_implementation = "sdpa"
    model = KeywordAdapter(transformers.GPT2LMHeadModel(config), ("input_ids",), "logits").eval()
    tokens = torch.randint(0, config.vocab_size, (1, 64))
    set_recorder_factory(lambda device: _NoReplayRecorder())
    compiled_graphs: list[Any] = []

    def ro_on_fake_device(graph: Any, example_inputs: Any) -> Any:
        compiled = inductor(graph, example_inputs)
        state = {id(t) for t in graph.constants.values()}
        static = {  # as ember-inductor's reduce-overhead marks them
            i
            for i, t in enumerate(example_inputs)
            if id(t) in state or isinstance(t, torch.nn.Parameter)
        }
        compiled.use_cudagraphs(torch.device("cuda", 0), static, FunctionMode.INFERENCE)
        compiled_graphs.append(compiled)
        return compiled

    ember_ro = ember.compile(model, backend=ro_on_fake_device)
    rows: dict[str, Any] = {"layers": layers}
    with torch.no_grad():
        expected = model(tokens)
        for _ in range(3):  # warm-up, record, replay
            out = ember_ro(tokens)
        rows["recorded_matches_eager"] = bool(torch.allclose(out, expected, atol=1e-4))
        state = type(ember_ro).forward._ember_compiled
        arguments = {"self": ember_ro, "inputs": (tokens,)}
        from ember.capture.translate import FUNCTION_KEY

        arguments[FUNCTION_KEY] = state.fn
        entry = state.table.entries[0]
        graph = compiled_graphs[0]
        seen: list[list[Any]] = []
        inner = graph.call
        graph.call = lambda a: (seen.append(list(a)), inner(a))[1]
        ember_ro(tokens)
        graph.call = inner
        args = seen[0]
        leaves = [args[p] if p is not None else None for p in graph._user_positions]
        tree = trees()[0]
        rows["graphs"] = len(compiled_graphs)
        rows["guards"] = len(entry.check.guards)
        rows["graph_inputs"] = graph._count
        rows["graph_outputs"] = len(graph.call(args))
        rows["ember_call_us"] = _median_us(lambda: ember_ro(tokens))
        check_inputs = entry.check.check_inputs
        rows["ember_guards_us"] = _median_us(lambda: entry.check.check(arguments, state.globals))
        rows["ember_guards_and_reads_us"] = _median_us(
            lambda: check_inputs(arguments, state.globals)
        )
        inputs = check_inputs(arguments, state.globals)
        rows["ember_entry_us"] = _median_us(lambda: entry.entry(dict(arguments), inputs))
        rows["ember_compiled_graph_us"] = _median_us(lambda: graph(*leaves))
        rows["ember_tree_us"] = _median_us(lambda: graph.call(args))
        rows["tree"] = {"nodes": tree.node_count(), "replays": tree.replays}

        outputs = tuple(compiled_graphs[0].call(args))

        def fixed_outputs(gm: Any, example_inputs: Any) -> Any:
            result = gm(*example_inputs)
            return lambda *a: result

        torch._dynamo.reset()
        torch_fixed = torch.compile(model, backend=fixed_outputs)
        torch_fixed(tokens)
        rows["torch_guards_dispatch_us"] = _median_us(lambda: torch_fixed(tokens))
        rows["eager_fixed_function_us"] = _median_us(lambda: (lambda *a: outputs)(tokens))
    set_recorder_factory(None)
    for key, value in rows.items():
        print(f"{key}: {value}", flush=True)
    return rows


def run_tree() -> dict[str, Any]:
    import timeit

    from ember.runtime.cudagraphs import cudagraphify, set_recorder_factory

    set_recorder_factory(lambda device: _NoReplayRecorder())
    params = [torch.randn(8) for _ in range(150)]

    def outputs26(args: list[Any]) -> tuple[torch.Tensor, ...]:
        return tuple(args[0] * i for i in range(26))

    call = cudagraphify(
        outputs26, name="g", device=torch.device("cuda", 0), static_positions=range(1, 151)
    )
    args = [torch.randn(8), *params]
    for _ in range(5):  # warm-up, record, replays
        call(args)
    best = min(timeit.repeat(lambda: call(args), number=2000, repeat=7)) / 2000
    set_recorder_factory(None)
    row = {"tree_us_per_call": best * 1e6}
    print(row, flush=True)
    return row


# ---- the host cost of the extern ops the suite calls ------------------------------------------


def _enqueue_us(call: Callable[[], Any], calls: int = 200) -> dict[str, float]:
    """Host microseconds a call (`calls` back to back, no synchronize: while the GPU keeps up
    with less, the loop's time is the host's) and the GPU's (the loop plus the drain)."""
    for _ in range(20):
        call()
    _sync()
    samples, totals = [], []
    for _ in range(5):
        begin = time.perf_counter()
        for _ in range(calls):
            call()
        queued = time.perf_counter()
        _sync()
        samples.append((queued - begin) / calls * 1e6)
        totals.append((time.perf_counter() - begin) / calls * 1e6)
    return {"host_us": round(min(samples), 1), "wall_us": round(min(totals), 1)}


def _linear_rows(label: str, m: int, k: int, n: int) -> dict[str, Any]:
    aten, bf16 = torch.ops.aten, torch.bfloat16
    x = torch.randn(m, k, device=DEVICE, dtype=bf16)
    w = torch.randn(k, n, device=DEVICE, dtype=bf16)
    bias = torch.randn(n, device=DEVICE, dtype=bf16)
    addmm, mm, add = aten.addmm.default._op, aten.mm.default._op, aten.add.Tensor._op
    return {
        f"{label} addmm": _enqueue_us(lambda: addmm(bias, x, w)),
        f"{label} mm": _enqueue_us(lambda: mm(x, w)),
        f"{label} mm + add": _enqueue_us(lambda: add(mm(x, w), bias)),
        f"{label} torch.addmm": _enqueue_us(lambda: torch.addmm(bias, x, w)),
    }


def _layer_rows(big: bool) -> dict[str, Any]:
    """A GPT-2 layer's four addmm shapes in turn (Conv1D: weight [in, out]), as ember calls
    them (functional, a fresh result each) and as torch.compile does (`out=` a buffer), and
    with BERT's transposed weights: the suite's in-model addmm cost 45 us of host (torch
    profiler) in ember's GPT-2 at 1c24e76, 33 in torch.compile's, 22 in ember's BERT, 23 in
    this loop's single shape (session 4). Per addmm."""
    bf16, m = torch.bfloat16, (4096 if big else 64)
    dims = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] if big else [(32, 48), (48, 32)]
    x = {k: torch.randn(m, k, device=DEVICE, dtype=bf16) for k, _ in dims}
    w = {(k, n): torch.randn(k, n, device=DEVICE, dtype=bf16) for k, n in dims}
    wt = {(k, n): torch.randn(n, k, device=DEVICE, dtype=bf16).t() for k, n in dims}
    b = {n: torch.randn(n, device=DEVICE, dtype=bf16) for _, n in dims}
    out = {n: torch.empty(m, n, device=DEVICE, dtype=bf16) for _, n in dims}
    addmm = torch.addmm

    def functional(weights: dict[Any, torch.Tensor]) -> None:
        for k, n in dims:
            addmm(b[n], x[k], weights[k, n])

    def into_buffers() -> None:
        for k, n in dims:
            addmm(b[n], x[k], w[k, n], out=out[n])

    rows = {
        "layer addmm [in, out] functional": _enqueue_us(lambda: functional(w)),
        "layer addmm [in, out] out=": _enqueue_us(into_buffers),
        "layer addmm [out, in].t() functional": _enqueue_us(lambda: functional(wt)),
    }
    return {
        label: {key: round(value / len(dims), 1) for key, value in row.items()}
        for label, row in rows.items()
    }


def run_externs() -> dict[str, Any]:
    """Host cost per call of the extern ops of the suite at its shapes (bf16): GPT-2's and
    BERT's linear layers as `addmm` (cuBLASLt with a bias epilogue) against `mm` and `mm`
    plus a separate bias add, ResNet-50's 3x3 convolution through `convolution` and through
    `cudnn_convolution`, each through the overload's dispatcher entry as the wrapper calls it."""
    aten = torch.ops.aten
    rows: dict[str, Any] = {}
    bf16 = torch.bfloat16
    big = DEVICE.type == "cuda"  # the suite's shapes; on the CPU (trying the script) small ones
    shapes = {"gpt2 c_attn": (4096, 768, 2304)} if big else {}
    for label, (m, k, n) in {**shapes, "small": (64, 64, 64)}.items():
        rows.update(_linear_rows(label, m, k, n))
    rows.update(_layer_rows(big))
    x = torch.randn(
        32 if big else 1, 64, 56 if big else 8, 56 if big else 8, device=DEVICE, dtype=bf16
    ).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device=DEVICE, dtype=bf16).to(memory_format=torch.channels_last)
    convolution = aten.convolution.default._op
    rows["resnet conv3x3 convolution"] = _enqueue_us(
        lambda: convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    )
    if DEVICE.type == "cuda":
        cudnn = aten.cudnn_convolution.default._op
        rows["resnet conv3x3 cudnn_convolution"] = _enqueue_us(
            lambda: cudnn(x, w, [1, 1], [1, 1], [1, 1], 1, False, False, True)
        )
    empty = torch.empty_strided
    rows["empty_strided 1 MB"] = _enqueue_us(
        lambda: empty((512, 512), (512, 1), dtype=torch.float32, device=DEVICE), 2000
    )
    base = torch.empty(1 << 20, device=DEVICE)
    rows["as_strided"] = _enqueue_us(lambda: base.as_strided((512, 512), (512, 1), 0), 2000)
    for name, row in rows.items():
        print(
            f"{name:36s} host {row['host_us']:7.1f} us   wall {row['wall_us']:7.1f} us", flush=True
        )
    return rows


def main() -> None:
    global DEVICE
    from benchmarks import cudagraph_suite as suite  # imports this module: not at the top

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "what",
        choices=("gpt2", "train", "profile", "host", "tree", "suite", "worker", "externs"),
    )
    parser.add_argument("--model", default="hf_gpt2")
    parser.add_argument("--size", default="small")
    parser.add_argument("--mode", default="inference")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--variants", help="comma-separated subset of the variants")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--json")
    parser.add_argument("--device", help="suite/worker: cuda (default), or cpu to try the script")
    parser.add_argument("--out", default="benchmarks/results/cudagraph-suite", help="suite")
    parser.add_argument("--models", default=",".join(suite.SUITE_MODELS), help="suite")
    parser.add_argument("--parts", default=",".join(suite.SUITE_PARTS), help="suite")
    parser.add_argument("--modes", default=",".join(suite.MODES), help="suite")
    parser.add_argument("--deadline", type=float, default=270.0, help="suite: seconds")
    parser.add_argument("--jobs", type=int, default=11, help="suite: workers at a time")
    parser.add_argument("--part", help="worker")
    parser.add_argument("--results", help="worker: the JSON-lines file its rows go to")
    parser.add_argument("--lock", help="worker: the measurement lock file")
    arguments = parser.parse_args()
    if arguments.device:
        DEVICE = torch.device(arguments.device)
    if arguments.what == "worker":
        suite.run_worker(arguments)
        return
    info = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    }
    if arguments.what == "suite":
        result = suite.run_suite(arguments)
    elif arguments.what == "gpt2":
        result = run_gpt2(arguments.variants)
    elif arguments.what == "tree":
        result = run_tree()
    elif arguments.what == "host":
        result = run_host(arguments.layers)
    elif arguments.what == "externs":
        result = run_externs()
    elif arguments.what == "train":
        result = run_train(arguments.model, arguments.size, arguments.steps, arguments.variants)
    else:
        result = run_profile(arguments.model, arguments.size, arguments.mode)
    result["environment"] = info
    text = json.dumps(result, indent=1, default=str)
    if arguments.json:
        Path(arguments.json).write_text(text)
    print(text)


if __name__ == "__main__":
    # run as the imported module, not as `__main__`: the suite reads this module's DEVICE,
    # which `main` sets from --device, through `benchmarks.cudagraph_overhead`
    from benchmarks import cudagraph_overhead

    cudagraph_overhead.main()
