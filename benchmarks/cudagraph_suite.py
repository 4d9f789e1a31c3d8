"""The cudagraph_overhead suite: the issue's "Done when" on the 5-model suite.

Default mode (wall per step against the GPU time the profiler records, launches, copies, where
the host time goes) and reduce-overhead (values against eager's, peak memory) in worker
processes (`run_worker`, one case each) that `run_suite` starts and summarizes (`summarize`).
Run through `python -m benchmarks.cudagraph_overhead suite ...` (and `... worker ...`); the
device is `cudagraph_overhead.DEVICE`, read at call time (its `main` sets it from `--device`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import cudagraph_overhead as overhead
from benchmarks.cudagraph_overhead import (
    _allocated,
    _ember_compile,
    _guards_in_c,
    _median_us,
    _peak,
    _release,
    _reset_peak,
    _sync,
    _train_steps,
    _tree_stats,
    _workload,
)
from benchmarks.thread_affinity import pin_threads

SUITE_MODELS = ("hf_resnet", "hf_vit", "hf_gpt2", "hf_bert", "hf_llama")
SUITE_PARTS = ("default", "reduce-overhead")
WALL_SAMPLES = 11  # default mode: wall samples per row, each pinned anew (`_pin_to_fastest_cpu`)
MODES = ("inference", "training")


def _error_text(error: BaseException) -> str:
    """An exception and where it was raised, short enough for a result row."""
    import traceback

    where = "".join(traceback.format_tb(error.__traceback__)[-3:])
    return f"{type(error).__name__}: {error}\n{where}"[:1500]


def _host_speed() -> dict[str, Any]:
    """The host's speed in this process, now: us a call of two fixed host-only ATen calls (an
    `as_strided` view and a 1 MB `empty_strided` on the device), and the CPUs it may run on
    and is on. At 1c24e76 every host op of one worker ran ~1.7-2x slower than the same op in
    another (`empty_strided` 10.3 vs 5.6 us, `addmm` 45 vs 22 in GPT-2's and BERT's ember
    workers, 33 vs 21 in their torch.compile runs): a row's wall is comparable to another's
    only at a similar speed."""
    device = overhead.DEVICE
    base = torch.empty(1 << 18, device=device)
    as_strided, empty = torch.as_strided, torch.empty_strided
    return {
        "as_strided_us": round(_median_us(lambda: as_strided(base, (512, 512), (512, 1), 0)), 2),
        "empty_strided_us": round(
            _median_us(lambda: empty((512, 512), (512, 1), dtype=torch.float32, device=device)),
            2,
        ),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": _current_cpu(),
    }


def _pin_to_fastest_cpu(allowed: set[int] | None = None) -> dict[str, Any]:
    """Pins this process (every thread: `thread_affinity.py`) to the CPU where a host-only
    ATen call (`as_strided`) runs fastest now, and returns what each CPU measured. On the device machine (a 16-vCPU VM, one NUMA
    node) a quiet process's host ops run at one of two speeds, 1.3-1.5 or 2.6-3.0 us an
    `as_strided`, by vCPU and changing over seconds (session 20: processes pinned to vCPUs
    0, 10, 14 slow, to 2-8 and 12 fast, in one sequence): a host-bound wall measured on a slow
    vCPU is up to 2x longer. `allowed`: the CPUs to try (default: those this process may run
    on now). The caller restores its affinity afterwards (`previous`: what it was)."""
    if not hasattr(os, "sched_setaffinity"):
        return {}
    previous = os.sched_getaffinity(0)
    allowed = allowed or previous
    base = torch.empty(1 << 10, device=overhead.DEVICE)
    as_strided = torch.as_strided
    speeds = {}
    for cpu in sorted(allowed):
        os.sched_setaffinity(0, {cpu})
        speeds[cpu] = round(_median_us(lambda: as_strided(base, (32, 32), (32, 1), 0), 1000, 5), 2)
    fastest = min(speeds, key=speeds.__getitem__)
    threads = pin_threads({fastest})  # the autograd engine's device thread runs the backward
    return {"pinned_cpu": fastest, "cpu_us": speeds, "previous": sorted(previous),
            "threads": threads}  # fmt: skip


def _current_cpu() -> int | None:
    """The CPU this thread last ran on (Linux: field 39 of /proc/thread-self/stat)."""
    try:
        fields = Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[36])
    except (OSError, IndexError, ValueError):
        return None


def _compiler(name: str) -> Callable[[torch.nn.Module], Any]:
    return {
        "torch.compile": torch.compile,
        "torch.compile reduce-overhead": lambda m: torch.compile(m, mode="reduce-overhead"),
        "ember": _ember_compile,
        "ember reduce-overhead": lambda m: _ember_compile(m, mode="reduce-overhead"),
        # settings measured beside ember's default (`--variants`): horizontal launches off
        # (on by default since session 20), convolution templates on (off by default), 1x1
        # convolutions kept cuDNN calls
        "ember separate": lambda m: _ember_compile(m, options={"horizontal_launches": False}),
        "ember horizontal": lambda m: _ember_compile(m, options={"horizontal_launches": True}),
        "ember conv-templates": lambda m: _ember_compile(m, options={"conv_templates": True}),
        # 1x1 convolutions as cuDNN calls (matrix multiplies by default since session 21)
        "ember cudnn": lambda m: _ember_compile(
            m, options={"pointwise_convolutions_as_matmuls": False}
        ),
        # each graph's wrapper run by Python (ember-runtime's C++ interpreter by default on
        # the GPU since session 22)
        "ember python": lambda m: _ember_compile(m, options={"native_wrapper": "never"}),
    }[name]


def _suite_step(run: Any, workload: Any, mode: str) -> Callable[[], Any]:
    """One step as the suite measures it: a no-grad forward under bf16 autocast, or (training)
    the gradients set to None, a forward and a backward (no optimizer: its eager kernels are
    the same for every compiler)."""
    module, inputs = workload.module, workload.inputs

    if mode == "inference":

        def inference() -> Any:
            with torch.no_grad(), torch.autocast(overhead.DEVICE.type, dtype=torch.bfloat16):
                return run(*inputs)

        return inference

    parameters = list(module.parameters())  # module.zero_grad walks the modules: ~1 ms a step

    def training() -> Any:
        for parameter in parameters:
            parameter.grad = None
        with torch.autocast(overhead.DEVICE.type, dtype=torch.bfloat16):
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
    if overhead.DEVICE.type == "cuda":
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


def _native_timings(step: Callable[[], Any], steps: int) -> list[str]:
    """The native wrapper's host time a step by kind of instruction (allocations, native and
    Python launches, each extern op), summed over the graphs whose programs run: what the
    programs' share of the wall time is made of. Empty where no graph runs one."""
    import gc

    from ember.inductor.codegen.native_wrapper import NativeCall

    programs = [
        o.program for o in gc.get_objects() if type(o) is NativeCall and o.program is not None
    ]
    if not programs:
        return []
    for program in programs:
        program.set_timing(True)
    for _ in range(steps):
        step()
    _sync()
    totals: dict[str, list[float]] = {}
    for program in programs:
        for key, (count, seconds) in program.timings().items():
            total = totals.setdefault(key, [0.0, 0.0])
            total[0] += count
            total[1] += seconds
        program.set_timing(False)
    whole = sum(seconds for _, seconds in totals.values())
    lines = [f"{whole / steps * 1e3:8.3f} ms/step in {len(programs)} programs"]
    for key, (count, seconds) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        per_call = seconds / count * 1e6 if count else 0.0
        lines.append(
            f"{seconds / steps * 1e3:8.3f} ms/step {count / steps:6.0f}x {per_call:6.1f} us  {key}"
        )
    return lines


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
        # several samples of 20 back-to-back steps, each on the vCPU fastest just before it
        # (a vCPU can slow down within seconds): the row's wall is their median
        walls, probes = [], []
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        for _ in range(WALL_SAMPLES):
            probes.append(_pin_to_fastest_cpu(allowed).get("cpu_us"))
            steps = 20
            begin = time.perf_counter()
            for _ in range(steps):
                step()
            _sync()
            walls.append((time.perf_counter() - begin) / steps * 1e3)
        row["wall_ms"] = statistics.median(walls)
        row["wall_samples_ms"] = [round(wall, 3) for wall in walls]
        row["host_speed"] = _host_speed()
        row["host_speed"]["cpus_us"] = probes
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
            row["native_timings"] = _native_timings(step, 5)
        if allowed:
            pin_threads(allowed)
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
    if overhead.DEVICE.type == "cuda":
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
    if overhead.DEVICE.type == "cuda":
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
        brief = {k: v for k, v in row.items() if k not in ("host_profile", "native_timings", "pid")}
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
    # the default part alone: one process per variant (session 20: a variant measured after
    # others in one process ran 5-40% slower, whichever it was)
    one = arguments.variants or ""
    cases = [
        (model, mode, part, variants)
        for model in models
        for mode in modes
        for part in ([",".join(parts)] if mode == "inference" else parts)
        for variants in (
            ["ember", "torch"] if mode == "training" and part == "reduce-overhead" and not one
            else (one or "ember,torch").split(",") if part == "default"
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
        command += ["--size", arguments.size, "--device", overhead.DEVICE.type]
        command += ["--results", str(results), "--lock", str(lock)]
        if variants:
            command += ["--variants", variants]
        case = f"{model} {mode} {part} {variants}".strip()
        log = log_of(case).open("ab")
        process = subprocess.Popen(
            command, cwd=overhead.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
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


def _spread(samples: list[float] | None) -> str:
    """The smallest and largest of a row's wall samples (host-bound rows spread 20-40%)."""
    if not samples:
        return "-"
    return f"{min(samples):.2f}-{max(samples):.2f}"


def summarize(rows: list[dict[str, Any]]) -> str:
    """The suite's two tables (default mode; reduce-overhead) as Markdown."""

    def number(value: Any, digits: int = 2) -> str:
        return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"

    lines = [
        "Default mode (wall: back-to-back steps; GPU: profiler kernel+memcpy+memset time)",
        "",
        "| model | mode | variant | wall ms | wall min-max ms | latency ms | GPU ms | wall/GPU | "
        "launches | DtoD memcpy | copy kernels | peak MB | first s | C guards | "
        "host us (view/alloc) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
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
            f"{_spread(row.get('wall_samples_ms'))} | "
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
                lines += ["", f"{row['variant']} host profile, {row['model']} {row['mode']}:"]
            lines.append("    " + text)
    for row in rows:  # the native wrapper's programs, by kind of instruction
        for text in row.get("native_timings", []):
            if text is row["native_timings"][0]:
                lines += ["", f"{row['variant']} native wrapper, {row['model']} {row['mode']}:"]
            lines.append("    " + text)
    return "\n".join(lines) + "\n"
