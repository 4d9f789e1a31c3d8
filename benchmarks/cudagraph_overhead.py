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
Needs CUDA except `host`, `tree` and `suite --device cpu`; not part of CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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


def _ember_compile(module: torch.nn.Module, mode: str | None = None) -> Any:
    """ember.compile with ember-inductor passed by object (no installed entry point needed)."""
    import ember
    from ember.inductor.backend import inductor

    return ember.compile(module, backend=inductor, mode=mode)


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


def _error_text(error: BaseException) -> str:
    """An exception and where it was raised, short enough for a result row."""
    import traceback

    where = "".join(traceback.format_tb(error.__traceback__)[-3:])
    return f"{type(error).__name__}: {error}\n{where}"[:1500]


def _release() -> None:
    """Free what a variant's compiler holds (graph pools included) before the next one."""
    import gc

    torch._dynamo.reset()  # benchmarks may reset the peer
    from ember.runtime.cudagraphs import reset_trees

    reset_trees()
    gc.collect()
    if DEVICE.type == "cuda":
        torch.cuda.empty_cache()


def _host_speed() -> dict[str, Any]:
    """The host's speed in this process, now: us a call of two fixed host-only ATen calls (an
    `as_strided` view and a 1 MB `empty_strided` on the device), and the CPUs it may run on
    and is on. At 1c24e76 every host op of one worker ran ~1.7-2x slower than the same op in
    another (`empty_strided` 10.3 vs 5.6 us, `addmm` 45 vs 22 in GPT-2's and BERT's ember
    workers, 33 vs 21 in their torch.compile runs): a row's wall is comparable to another's
    only at a similar speed."""
    base = torch.empty(1 << 18, device=DEVICE)
    as_strided, empty = torch.as_strided, torch.empty_strided
    return {
        "as_strided_us": round(_median_us(lambda: as_strided(base, (512, 512), (512, 1), 0)), 2),
        "empty_strided_us": round(
            _median_us(lambda: empty((512, 512), (512, 1), dtype=torch.float32, device=DEVICE)),
            2,
        ),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": _current_cpu(),
    }


def _current_cpu() -> int | None:
    """The CPU this thread last ran on (Linux: field 39 of /proc/thread-self/stat)."""
    try:
        fields = Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[36])
    except (OSError, IndexError, ValueError):
        return None


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

    def record(self, call: Callable[[list[Any]], Any], args: list[Any]) -> _NoReplayRecording:
        return _NoReplayRecording(tuple(call(args)))

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


# ---- the "Done when" on the suite: default-mode overhead, reduce-overhead memory --------

SUITE_MODELS = ("hf_resnet", "hf_vit", "hf_gpt2", "hf_bert", "hf_llama")
SUITE_PARTS = ("default", "reduce-overhead")
MODES = ("inference", "training")


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


def _compiler(name: str) -> Callable[[torch.nn.Module], Any]:
    return {
        "torch.compile": torch.compile,
        "torch.compile reduce-overhead": lambda m: torch.compile(m, mode="reduce-overhead"),
        "ember": _ember_compile,
        "ember reduce-overhead": lambda m: _ember_compile(m, mode="reduce-overhead"),
    }[name]


def _suite_step(run: Any, workload: Any, mode: str) -> Callable[[], Any]:
    """One step as the suite measures it: a no-grad forward under bf16 autocast, or (training)
    the gradients set to None, a forward and a backward (no optimizer: its eager kernels are
    the same for every compiler)."""
    module, inputs = workload.module, workload.inputs

    if mode == "inference":

        def inference() -> Any:
            with torch.no_grad(), torch.autocast(DEVICE.type, dtype=torch.bfloat16):
                return run(*inputs)

        return inference

    parameters = list(module.parameters())  # module.zero_grad walks the modules: ~1 ms a step

    def training() -> Any:
        for parameter in parameters:
            parameter.grad = None
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            loss = run(*inputs)
        loss.backward()
        return loss

    return training


def _device_profile(step: Callable[[], Any], steps: int) -> dict[str, float]:
    """GPU time and launches per step from the torch profiler's device activity: kernel time
    (kernels, memcpy and memset), launches, device-to-device memcpys, and copy kernels (any
    kernel or memcpy whose name says copy: restrides, clones, copy-backs, foreach copies);
    and the host side of the same steps: the ATen ops and CUDA runtime calls with the most
    self CPU time per step (which extern op, allocation or launch holds the host)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if DEVICE.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        _sync()
    from collections import Counter

    device_us = 0.0
    launches = dtod = copies = 0
    copy_names: Counter[str] = Counter()
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        device_us += event.device_time
        launches += 1
        name = event.name.lower()
        if "memcpy dtod" in name:
            dtod += 1
        if "copy" in name:
            copies += 1
            copy_names[event.name[:120]] += 1
    host = sorted(
        (
            (average.self_cpu_time_total / steps, average.count / steps, average.key)
            for average in prof.key_averages()
            if average.self_cpu_time_total > 0
        ),
        reverse=True,
    )
    return {
        "gpu_kernel_ms": device_us / steps / 1e3,
        "launches_per_step": launches / steps,
        "dtod_copies_per_step": dtod / steps,
        "copy_kernels_per_step": copies / steps,
        "copy_kernels": {name: count / steps for name, count in copy_names.most_common(6)},
        "host_ops": [  # self CPU us a step (profiled: inflated), calls a step, op
            f"{us:8.1f} us {count:6.1f}x {key[:70]}" for us, count, key in host[:10]
        ],
    }


def _host_profile(step: Callable[[], Any], steps: int, top: int = 14) -> list[str]:
    """Where the host time of `steps` steps goes (cProfile, by own time): the generated
    wrappers, guards, launches, extern calls, autograd. Entries are summed by label from the
    profiler's raw entries: `pstats` keeps one entry a label, and distinct builtins share one
    (each Triton kernel's `__triton_launcher.launch`, each overload's pybind entry): at
    1c24e76 the rows showed one of them (GPT-2's 48 addmm, BERT's 12 attention calls, 8 of
    GPT-2's 134 launches)."""
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    _sync()
    totals: dict[str, tuple[float, int, float]] = {}
    for entry in profiler.getstats():
        code = entry.code
        if isinstance(code, str):  # a builtin
            where = f"~:0({code})"
        else:
            where = f"{Path(code.co_filename).name}:{code.co_firstlineno}({code.co_name})"
        own, calls, cumulative = totals.get(where, (0.0, 0, 0.0))
        totals[where] = (
            own + entry.inlinetime,
            calls + entry.callcount,
            cumulative + entry.totaltime,
        )
    rows = sorted(((own, calls, cum, where) for where, (own, calls, cum) in totals.items()),
                  reverse=True)  # fmt: skip
    return [
        f"{own / steps * 1e3:7.3f} ms/step own {cum / steps * 1e3:7.3f} cum {calls // steps:5d}x {where}"
        for own, calls, cum, where in rows[:top]
    ]


def run_default_case(model: str, size: str, mode: str, compiler: str, hold: Any) -> dict[str, Any]:
    """Default mode: wall per step (back to back, one synchronize: what a training or serving
    loop sees) against the GPU kernel time per step, launches and copies per step."""
    torch.manual_seed(0)
    workload = _workload(model, size, mode)
    _sync()
    base = _allocated()
    run = _compiler(compiler)(workload.module)
    step = _suite_step(run, workload, mode)
    row: dict[str, Any] = {"model": model, "mode": mode, "part": "default", "variant": compiler}
    start = time.perf_counter()
    step()
    _sync()
    row["first_call_s"] = time.perf_counter() - start
    for _ in range(3):
        step()
    _sync()
    native = _guards_in_c()  # torch.compile's rows too: none measures while they build
    row["native_guards"] = native if compiler.startswith("ember") else None
    _reset_peak()
    with hold():
        _sync()
        row["host_speed"] = _host_speed()
        steps = 20
        begin = time.perf_counter()
        for _ in range(steps):
            step()
        _sync()
        row["wall_ms"] = (time.perf_counter() - begin) / steps * 1e3
        samples = []
        for _ in range(7):
            begin = time.perf_counter()
            step()
            _sync()
            samples.append((time.perf_counter() - begin) * 1e3)
        row["latency_ms"] = statistics.median(samples)
        row.update(_device_profile(step, 3))
        if compiler.startswith("ember"):
            row["host_profile"] = _host_profile(step, 3)
    row["peak_mb"] = (_peak() - base) / 2**20
    if row["gpu_kernel_ms"]:
        row["wall_over_gpu"] = row["wall_ms"] / row["gpu_kernel_ms"]
    return row


def _infer_steps(model: str, size: str, compile_fn: Any, steps: int, hold: Any) -> dict[str, Any]:
    """Inference under bf16 autocast: the first and a steady output, step time, peak memory
    above the model and its inputs (graph pools included)."""
    torch.manual_seed(0)
    workload = _workload(model, size, "inference")
    _sync()
    if DEVICE.type == "cuda":
        torch.cuda.empty_cache()
    base = _allocated()
    _reset_peak()
    run = compile_fn(workload.module) if compile_fn is not None else workload.module
    step = _suite_step(run, workload, "inference")
    start = time.perf_counter()
    first = step().detach().float().clone()  # before a replay overwrites it
    for _ in range(3):  # warm-up, recording, replay
        step()
    _sync()
    warm_s = time.perf_counter() - start
    native = _guards_in_c() if compile_fn is not None else None
    with hold():
        begin = time.perf_counter()
        for _ in range(steps):
            step()
        _sync()
        step_ms = (time.perf_counter() - begin) / steps * 1e3
    last = step().detach().float().clone()
    _sync()
    row = {
        "outputs": [first.cpu(), last.cpu()],  # compared on the CPU: others' memory is theirs
        "warmup_s": warm_s,
        "step_ms": step_ms,
        "peak_mb": (_peak() - base) / 2**20,
        "native_guards": native,
    }
    if DEVICE.type == "cuda":
        held = _allocated() - base - 2 * first.nbytes  # less the two float32 copies
        row["resident_mb"] = held / 2**20
        row["reserved_peak_mb"] = torch.cuda.max_memory_reserved() / 2**20
    return row


def run_reduce_overhead_case(
    model: str,
    size: str,
    mode: str,
    hold: Any,
    emit: Callable[[dict[str, Any]], None],
    only: str | None = None,
) -> None:
    """Eager, torch.compile and ember with mode="reduce-overhead" in one process: values
    (inference: outputs; training: losses and gradients after SGD steps) against eager's, and
    peak memory (torch.cuda.max_memory_allocated above the model, graph pools included)."""
    variants: dict[str, Any] = {
        "eager": None,
        "torch.compile reduce-overhead": _compiler("torch.compile reduce-overhead"),
        "ember reduce-overhead": _compiler("ember reduce-overhead"),
    }
    if only:  # eager stays: the reference; the others in the order asked
        wanted = ["eager", *only.split(",")]
        variants = {k: variants[k] for k in wanted if k in variants}
    reference: dict[str, Any] | None = None
    for name, compile_fn in variants.items():
        row: dict[str, Any] = {"model": model, "mode": mode, "part": "reduce-overhead"}
        row["variant"] = name
        try:
            reference = _reduce_overhead_variant(
                row, model, size, mode, compile_fn, hold, reference
            )
        except (Exception, SystemExit) as error:  # a row that says why; the next variant runs
            row["error"] = _error_text(error)
        emit(row)
        try:
            _release()
        except (Exception, SystemExit) as error:  # say why, and let the next variant try
            emit({**row, "variant": f"{name} (release)", "error": _error_text(error)})


def _reduce_overhead_variant(
    row: dict[str, Any],
    model: str,
    size: str,
    mode: str,
    compile_fn: Any,
    hold: Any,
    reference: dict[str, Any] | None,
) -> dict[str, Any]:
    """One variant's steps into `row`, its values against the reference's (eager's, the
    first variant); returns the reference."""
    if mode == "training":
        out = _train_steps(model, size, compile_fn, 10, hold)
        values = out.pop("grads")
        out["loss_first_last"] = [out["losses"][0], out.pop("losses")[-1]]
    else:
        out = _infer_steps(model, size, compile_fn, 20, hold)
        values = out.pop("outputs")
    row.update(out)
    if reference is None:
        return {"values": values, "peak_mb": out["peak_mb"]}
    errors = [
        ((v - r).norm() / (r.norm() + 1e-12)).item() for v, r in zip(values, reference["values"])
    ]
    row["rel_err_vs_eager_max"] = max(errors) if errors else None
    row["rel_err_vs_eager_median"] = statistics.median(errors) if errors else None
    if values and len(values) == len(reference["values"]):  # all values as one vector
        difference = sum((v - r).norm() ** 2 for v, r in zip(values, reference["values"]))
        total = sum(r.norm() ** 2 for r in reference["values"])
        row["rel_err_vs_eager_all"] = (difference / total).sqrt().item()
    row["compared"] = (len(values), len(reference["values"]))
    if row["variant"].startswith("ember"):
        row["tree"] = _tree_stats()
    return reference


def run_worker(arguments: argparse.Namespace) -> None:
    """One case of the suite (a model, a part, a mode), its rows appended to --results."""
    import faulthandler

    from benchmarks.device_lock import MeasurementLock

    faulthandler.enable()  # a crash in C++ leaves its Python stack in the worker's log
    lock = MeasurementLock(Path(arguments.lock), pause_others=True, drain_s=0.2)
    lock.register()
    results = Path(arguments.results)

    def emit(row: dict[str, Any]) -> None:
        row["pid"] = os.getpid()
        line = json.dumps(row, default=str)
        with results.open("a") as file:
            file.write(line + "\n")
        brief = {k: v for k, v in row.items() if k not in ("host_profile", "pid")}
        print(json.dumps(brief, default=str)[:600], flush=True)

    parts = (arguments.part or ",".join(SUITE_PARTS)).split(",")
    if "default" in parts:
        compilers = arguments.variants.split(",") if arguments.variants else ("ember", "torch")
        for compiler in compilers:
            name = "torch.compile" if compiler == "torch" else compiler
            try:
                row = run_default_case(
                    arguments.model, arguments.size, arguments.mode, name, lock.hold
                )
            except (Exception, SystemExit) as error:
                row = {"model": arguments.model, "mode": arguments.mode, "part": "default"}
                row["variant"] = name
                row["error"] = _error_text(error)
            emit(row)
            _release()
    if "reduce-overhead" in parts:
        # torch.compile's first: at 02:58 every worker exited 1 after ember's rows, before
        # torch's (not reproduced on the CPU); a variant's failure is a row with its traceback
        only = ",".join(
            f"{'torch.compile' if v == 'torch' else v} reduce-overhead"
            for v in (arguments.variants.split(",") if arguments.variants else ("torch", "ember"))
        )
        run_reduce_overhead_case(
            arguments.model, arguments.size, arguments.mode, lock.hold, emit, only
        )


def run_suite(arguments: argparse.Namespace) -> dict[str, Any]:
    """Worker processes (a crash poisons only its own CUDA context): per model, inference
    (default mode: ember, then torch.compile; then reduce-overhead: eager, ember,
    torch.compile), training default mode, training reduce-overhead. They compile in parallel
    and measure one at a time (the measurement lock pauses the others); killed at --deadline
    seconds; the rows so far summarized."""
    import signal
    import subprocess
    import tempfile

    from benchmarks.device_lock import end_pause_of

    out = Path(arguments.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    lock = Path(tempfile.mkdtemp(prefix="cudagraph-suite-")) / "measure.lock"  # not under --out
    started = time.monotonic()
    models = arguments.models.split(",")
    parts = arguments.parts.split(",")
    logs = out / "logs"  # one per worker: a worker that dies says why in its own file
    logs.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("EMBER_COMPILE_THREADS", "2")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "2")
    workers: dict[int, tuple[subprocess.Popen[bytes], str]] = {}
    # the C tensor guards built here, in the background, while the workers compile (a worker
    # that would build them is paused whenever another measures): each worker waits for them
    # before it measures (`_guards_in_c`) and loads them from disk
    from ember.capture.guards.native import NATIVE

    NATIVE.module()
    modes = arguments.modes.split(",")
    # inference: both parts in one process (ember reuses its kernels, torch its graph cache);
    # training compiles longest: default mode in one process, reduce-overhead in one per
    # compiler (each with eager's reference), compiling side by side: at 05:30 ember's
    # training rows waited behind torch.compile's 30-100 s warm-ups and missed the deadline
    one = arguments.variants or ""
    cases = [
        (model, mode, part, variants)
        for model in models
        for mode in modes
        for part in ([",".join(parts)] if mode == "inference" else parts)
        for variants in (
            ["ember", "torch"] if mode == "training" and part == "reduce-overhead" and not one
            else [one]
        )
    ]  # fmt: skip
    order = {"training default": 0, "inference default,reduce-overhead": 1}
    cases.sort(key=lambda case: order.get(f"{case[1]} {case[2]}", 2))  # stable: model order kept
    pending = list(cases)

    def log_of(case: str) -> Path:
        return logs / (case.replace(",", "+").replace(" ", "-").strip("-") + ".log")

    def start(model: str, mode: str, part: str, variants: str) -> None:
        command = [sys.executable, "-m", "benchmarks.cudagraph_overhead", "worker"]
        command += ["--model", model, "--part", part, "--mode", mode]
        command += ["--size", arguments.size, "--device", DEVICE.type]
        command += ["--results", str(results), "--lock", str(lock)]
        if variants:
            command += ["--variants", variants]
        case = f"{model} {mode} {part} {variants}".strip()
        log = log_of(case).open("ab")
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()  # the child holds its own descriptor
        workers[process.pid] = (process, case)

    while pending and len(workers) < arguments.jobs:
        start(*pending.pop(0))
    exits: dict[str, Any] = {}
    while workers or pending:
        time.sleep(0.5)
        while pending and len(workers) < arguments.jobs:  # at most --jobs hold GPU memory
            start(*pending.pop(0))
        for pid, (process, case) in list(workers.items()):
            code = process.poll()
            if code is None:
                continue
            del workers[pid]
            exits[case] = code
            if code:
                text = log_of(case).read_text(errors="replace")
                tail = "\n    ".join(text.splitlines()[-12:])
                print(f"worker {case}: exit {code}; its log ends:\n    {tail}", flush=True)
            if end_pause_of(lock, pid):  # died holding the lock: resume the paused
                for other in workers:
                    os.killpg(other, signal.SIGCONT)
        if time.monotonic() - started > arguments.deadline:
            for pid, (_, case) in workers.items():
                os.killpg(pid, signal.SIGKILL)
                exits[case] = "killed at the deadline"
                print(f"worker {case}: killed at the deadline", flush=True)
            for model, mode, part, variants in pending:
                exits[f"{model} {mode} {part} {variants}".strip()] = "not started by the deadline"
            break
    rows = (
        [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    )
    summary = summarize(rows)
    (out / "summary.md").write_text(summary)
    print(summary, flush=True)
    return {"exits": exits, "rows": len(rows), "seconds": time.monotonic() - started}


def _verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's items per model and mode: ember's wall <= 1.15x its GPU time, its
    device-to-device memcpys <= torch.compile's, its reduce-overhead peak <= torch's."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in rows:
        if "error" not in row:
            found[(row["model"], row["mode"], row["variant"])] = row
    lines = ["Done-when check (ember against its GPU time and against torch.compile):", ""]
    for model, mode in sorted({(row["model"], row["mode"]) for row in rows}):
        ours = found.get((model, mode, "ember"), {})
        theirs = found.get((model, mode, "torch.compile"), {})
        ro = found.get((model, mode, "ember reduce-overhead"), {})
        ro_theirs = found.get((model, mode, "torch.compile reduce-overhead"), {})
        parts = [f"{model} {mode}:"]
        if ours.get("wall_over_gpu") is not None:
            verdict = "yes" if ours["wall_over_gpu"] <= 1.15 else "NO"
            parts.append(f"wall/GPU {ours['wall_over_gpu']:.2f} (<= 1.15: {verdict})")
        if theirs.get("wall_over_gpu") is not None:
            parts.append(f"[torch {theirs['wall_over_gpu']:.2f}]")
        if "dtod_copies_per_step" in ours and "dtod_copies_per_step" in theirs:
            a, b = ours["dtod_copies_per_step"], theirs["dtod_copies_per_step"]
            parts.append(f"DtoD {a:.0f} vs torch {b:.0f} ({'yes' if a <= b else 'NO'})")
        if "peak_mb" in ro and "peak_mb" in ro_theirs:
            a, b = ro["peak_mb"], ro_theirs["peak_mb"]
            parts.append(f"RO peak {a:.0f} vs torch {b:.0f} MB ({'yes' if a <= b else 'NO'})")
        if "reserved_peak_mb" in ro and "reserved_peak_mb" in ro_theirs:
            # what each process holds from the device: the comparable figure (torch's trees
            # free recorded outputs in the allocator's accounting through private checkpoint
            # calls, so their allocated peak leaves out memory the pool keeps reserved)
            a, b = ro["reserved_peak_mb"], ro_theirs["reserved_peak_mb"]
            parts.append(
                f"RO reserved peak {a:.0f} vs torch {b:.0f} MB ({'yes' if a <= b else 'NO'})"
            )
        if "rel_err_vs_eager_all" in ro:
            parts.append(
                f"RO rel err {ro['rel_err_vs_eager_all']:.2e} "
                f"[torch {ro_theirs.get('rel_err_vs_eager_all', float('nan')):.2e}]"
            )
        lines.append("- " + " ".join(parts))
    return lines


def _speed(speed: dict[str, Any] | None) -> str:
    if not speed:
        return "-"
    return f"{speed['as_strided_us']:.2f} / {speed['empty_strided_us']:.2f}"


def _yes_no(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def summarize(rows: list[dict[str, Any]]) -> str:
    """The suite's two tables (default mode; reduce-overhead) as Markdown."""

    def number(value: Any, digits: int = 2) -> str:
        return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"

    lines = [
        "Default mode (wall: back-to-back steps; GPU: profiler kernel+memcpy+memset time)",
        "",
        "| model | mode | variant | wall ms | latency ms | GPU ms | wall/GPU | launches | "
        "DtoD memcpy | copy kernels | peak MB | first s | C guards | host us (view/alloc) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if row.get("part") != "default":
            continue
        if "error" in row:
            lines.append(f"| {row['model']} | {row['mode']} | {row['variant']} | error: "
                         f"{row['error'][:160]} |")  # fmt: skip
            continue
        lines.append(
            f"| {row['model']} | {row['mode']} | {row['variant']} | {number(row['wall_ms'])} | "
            f"{number(row['latency_ms'])} | {number(row['gpu_kernel_ms'])} | "
            f"{number(row.get('wall_over_gpu'))} | {number(row['launches_per_step'], 0)} | "
            f"{number(row['dtod_copies_per_step'], 0)} | {number(row['copy_kernels_per_step'], 0)} | "
            f"{number(row['peak_mb'], 0)} | {number(row['first_call_s'], 1)} | "
            f"{_yes_no(row.get('native_guards'))} | {_speed(row.get('host_speed'))} |"
        )
    lines += [
        "",
        "Reduce-overhead (peak: max_memory_allocated above the model, graph pools included as "
        "the allocator counts them: torch's trees free a recording's memory in its accounting, "
        "ember's nodes keep theirs allocated; reserved peak: max_memory_reserved, what the "
        "process holds; rel err of outputs (inference) or gradients (training) against eager: "
        "all as one vector / median / max over tensors)",
        "",
        "| model | mode | variant | step ms | peak MB | resident MB | reserved peak MB | "
        "rel err all / median / max | loss first/last | tree | warm-up s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if row.get("part") != "reduce-overhead":
            continue
        if "error" in row:
            lines.append(f"| {row['model']} | {row['mode']} | {row['variant']} | error: "
                         f"{row['error'][:160]} |")  # fmt: skip
            continue
        losses = row.get("loss_first_last")
        loss = "/".join(f"{v:.4f}" for v in losses) if losses else "-"
        tree = row.get("tree")
        lines.append(
            f"| {row['model']} | {row['mode']} | {row['variant']} | {number(row['step_ms'])} | "
            f"{number(row['peak_mb'], 0)} | {number(row.get('resident_mb'), 0)} | "
            f"{number(row.get('reserved_peak_mb'), 0)} | "
            f"{number(row.get('rel_err_vs_eager_all'), 4)} / "
            f"{number(row.get('rel_err_vs_eager_median'), 4)} / "
            f"{number(row.get('rel_err_vs_eager_max'), 4)} | {loss} | {tree or '-'} | "
            f"{number(row['warmup_s'], 1)} |"
        )
    lines += ["", *_verdicts(rows), ""]
    for row in rows:  # which kernels copy (names with "copy"), per step
        if row.get("copy_kernels") and row["variant"] == "ember":
            lines.append(f"ember copy kernels, {row['model']} {row['mode']}: {row['copy_kernels']}")
    for row in rows:  # the host side by ATen op / CUDA call (torch profiler, self CPU time)
        if row.get("host_ops") and row.get("part") == "default":
            lines += ["", f"{row['variant']} host ops, {row['model']} {row['mode']}:"]
            lines += ["    " + text for text in row["host_ops"][:8]]
    for row in rows:
        for text in row.get("host_profile", []):
            if text is row["host_profile"][0]:
                lines += ["", f"ember host profile, {row['model']} {row['mode']}:"]
            lines.append("    " + text)
    return "\n".join(lines) + "\n"


def main() -> None:
    global DEVICE
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
    parser.add_argument("--models", default=",".join(SUITE_MODELS), help="suite")
    parser.add_argument("--parts", default=",".join(SUITE_PARTS), help="suite")
    parser.add_argument("--modes", default=",".join(MODES), help="suite")
    parser.add_argument("--deadline", type=float, default=270.0, help="suite: seconds")
    parser.add_argument("--jobs", type=int, default=11, help="suite: workers at a time")
    parser.add_argument("--part", help="worker")
    parser.add_argument("--results", help="worker: the JSON-lines file its rows go to")
    parser.add_argument("--lock", help="worker: the measurement lock file")
    arguments = parser.parse_args()
    if arguments.device:
        DEVICE = torch.device(arguments.device)
    if arguments.what == "worker":
        run_worker(arguments)
        return
    info = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    }
    if arguments.what == "suite":
        result = run_suite(arguments)
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
    main()
