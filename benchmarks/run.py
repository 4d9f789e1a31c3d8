"""`python -m benchmarks.run`: runs the model suite under each backend and writes the results.

Cases are planned model by model, then inference before training, then dtype by dtype,
eager first in every group; `--jobs` worker processes each take the next model, and a
cross-process lock keeps their measurements from overlapping. Every finished case is
appended to results.jsonl at once and the dashboard is rewritten after every case, so a run
that is cut off still leaves everything it measured. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks import backends, concurrency, environment, records, report, resume
from benchmarks.case import Settings
from benchmarks.models import MODES, SIZES, SUITE, missing, spec
from benchmarks.scheduler import Limits, run_tasks

DTYPES = ("float32", "bf16")
DEFAULT_BACKENDS = "eager,torch.compile,ember"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument(
        "--size", choices=SIZES, help="model size (default: small on cpu, gpu on cuda)"
    )
    parser.add_argument("--models", help="comma-separated model names (default: all); see --list")
    parser.add_argument("--modes", default=",".join(MODES), help="inference,training")
    parser.add_argument("--dtypes", help="float32,bf16 (default: float32 on cpu, both on cuda)")
    parser.add_argument(
        "--backends",
        default=DEFAULT_BACKENDS,
        help="eager, torch.compile, torch.compile:<backend>, ember (every registered ember "
        "backend) or ember:<name> (default: %(default)s)",
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steps per case")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps after the first")
    parser.add_argument("--timing-allowance", type=float, default=15.0, help="s of timing per case")
    parser.add_argument("--no-warm-compile", action="store_true", help="skip the warm compile")
    parser.add_argument("--case-timeout", type=float, default=300.0, help="s per case")
    parser.add_argument("--model-budget", type=float, default=900.0, help="s per model and dtype")
    parser.add_argument("--budget", type=float, default=1800.0, help="s for the whole run")
    parser.add_argument(
        "--quick", action="store_true", help="2 timed steps, 1 warm-up: a smoke run"
    )
    parser.add_argument(
        "--out", type=Path, help="output folder (default: benchmarks/results/<stamp>)"
    )
    parser.add_argument("--threads", type=int, help="torch CPU threads in the worker")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="worker processes at once; measurements never overlap (default: %(default)s)",
    )
    parser.add_argument(
        "--lock-file",
        type=Path,
        help="measurement lock file; give several runs the same one to serialize them "
        "(default: one per run)",
    )
    parser.add_argument(
        "--no-pause",
        action="store_true",
        help="a measuring worker does not pause the others: measurements still never overlap, "
        "but other workers' compiles share the CPU with them (a correctness run of many small "
        "models, where pausing would serialize most of the run)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run whose results.jsonl is in --out: same run id, and only the "
        "cases without a result yet (none, or skipped when a budget ran out) are planned; a "
        "run longer than one session or machine allows is then still one run",
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="time each backend in turn with eager and the group's earlier backends, step by "
        "step in the same rounds (their compiled steps kept until the group ends), so that "
        "load from other processes biases no ratio; speedups use eager's median over the "
        "same rounds",
    )
    parser.add_argument("--list", action="store_true", help="list models and backends, then exit")
    return parser.parse_args(argv)


def _tasks(arguments: argparse.Namespace, size: str, dtypes: list[str]) -> list[dict[str, Any]]:
    names = arguments.models.split(",") if arguments.models else [s.name for s in SUITE]
    backend_names = [b.name for b in backends.resolve(arguments.backends.split(","))]
    if "eager" in backend_names:  # eager first: the others are related to it
        backend_names.remove("eager")
        backend_names.insert(0, "eager")
    tasks = []
    for name in names:  # one model's tasks together: one worker runs them on one reference
        entry = spec(name)
        for mode in arguments.modes.split(","):
            for dtype in dtypes:
                for backend in backend_names:
                    tasks.append(
                        {
                            "id": f"{name}/{mode}/{dtype}/{backend}",
                            "model": name,
                            "suite": entry.suite,
                            "size": size,
                            "mode": mode,
                            "dtype": dtype,
                            "backend": backend,
                        }
                    )
    return tasks


def main(argv: list[str] | None = None) -> int:
    arguments = _arguments(argv)
    ember_source = backends.ensure_ember_importable()
    if arguments.list:
        for entry in SUITE:
            print(f"{entry.name:24} {entry.suite:12} {missing(entry) or 'available'}")
        for backend in backends.resolve(arguments.backends.split(",")):
            print(f"{backend.name:24} {backend.kind:12} {backend.unavailable or 'available'}")
        return 0
    device = arguments.device
    size = arguments.size or ("gpu" if device.startswith("cuda") else "small")
    dtypes = (
        arguments.dtypes or ("float32,bf16" if device.startswith("cuda") else "float32")
    ).split(",")
    settings = Settings(
        steps=2 if arguments.quick else arguments.steps,
        warmup=1 if arguments.quick else arguments.warmup,
        timing_allowance_s=arguments.timing_allowance,
        warm_compile=not arguments.no_warm_compile,
    )
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    out = arguments.out or Path(__file__).resolve().parent / "results" / f"{stamp}-{device}"
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    done: set[str] = set()
    resumed_from = None
    if arguments.resume:
        if not results.exists():
            sys.exit(f"--resume: {results} does not exist; start the run without --resume")
        resumed_from, done = resume.finished(results)
        stamp = resumed_from

    # A fresh compiler cache per run: the first compile of each graph is cold; the warm
    # compile after a reset in the same process then reads this cache.
    cache = Path(tempfile.mkdtemp(prefix="ember-bench-cache-"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(cache / "triton"))
    if arguments.threads:
        os.environ["OMP_NUM_THREADS"] = str(arguments.threads)  # workers read it at start-up
        torch.set_num_threads(arguments.threads)  # so the header records the same count

    plan = concurrency.plan(arguments.jobs)
    lock_path = arguments.lock_file or cache / "measurement.lock"
    tasks = [t for t in _tasks(arguments, size, dtypes) if t["id"] not in done]
    header = {
        "record": "run",
        "run_id": stamp,
        **({"resumed": len(done)} if resumed_from else {}),
        "device": device,
        "size": size,
        "settings": vars(settings),
        "limits": {
            "case_s": arguments.case_timeout,
            "model_s": arguments.model_budget,
            "total_s": arguments.budget,
        },
        "concurrency": {
            **plan.describe(),
            "lock": "exclusive fcntl lock around references, warm-up, timed steps and memory; "
            + (
                "other workers keep compiling meanwhile (--no-pause)"
                if arguments.no_pause
                else "the holder pauses the other workers (SIGSTOP/SIGCONT); compile times "
                "exclude pauses"
            ),
            "lock_file": str(lock_path),
            "omp_threads": os.environ.get("OMP_NUM_THREADS"),
            "interleave": arguments.interleave,
        },
        "command": " ".join([Path(sys.executable).name, "-m", "benchmarks.run", *sys.argv[1:]]),
        "environment": environment.collect(backends.REPOSITORY, ember_source),
    }
    records.append(results, header)
    print(environment.describe(header["environment"]), flush=True)
    print(
        f"{len(tasks)} cases -> {out}"
        + (
            f" (resuming run {stamp}: {len(done)} cases already have a result)"
            if resumed_from
            else ""
        ),
        flush=True,
    )

    started = time.monotonic()

    def emit(task: dict[str, Any], record: dict[str, Any]) -> None:
        full = {"record": "case", "run_id": stamp, "device": device, **task, **record}
        full.pop("id", None)
        records.append(results, full)
        print(
            f"[{time.monotonic() - started:7.1f}s] {task['id']:58} {record.get('status'):14} "
            + _summary(record),
            flush=True,
        )
        report.write(out, [results], with_chart=False)

    options = {
        "device": device,
        "settings": vars(settings),
        "backends": sorted({t["backend"] for t in tasks}),
        "lock_path": str(lock_path),
        "pause_others": plan.jobs > 1 and not arguments.no_pause,
        "interleave": arguments.interleave,
    }
    unavailable = [t for t in tasks if _unavailable_reason(t)]
    for task in unavailable:
        emit(task, {"status": "not_available", "error": _unavailable_reason(task)})
    runnable = [t for t in tasks if not _unavailable_reason(t)]
    limits = Limits(arguments.case_timeout, arguments.model_budget, arguments.budget)
    with (out / "worker.log").open("a") as log:
        run_tasks(runnable, options, limits, log, emit, plan.jobs, plan.worker_environment())
    report.write(out, [results])
    print(f"wrote {out / 'dashboard.md'}", flush=True)
    return 0


_REASONS: dict[str, str | None] = {}


def _unavailable_reason(task: dict[str, Any]) -> str | None:
    """Why a task cannot run here (missing package or ember backend), decided without a worker."""
    key = f"{task['model']}|{task['backend']}"
    if key not in _REASONS:
        reason = missing(spec(task["model"]))
        if reason is None:
            reason = backends.lookup(task["backend"]).unavailable
        _REASONS[key] = reason
    return _REASONS[key]


def _summary(record: dict[str, Any]) -> str:
    if record.get("status") in ("pass", "fail_accuracy"):
        parts = [f"{record.get('median_ms', 0):9.2f} ms"]
        if record.get("speedup"):
            parts.append(f"x{record['speedup']:.2f}")
        if record.get("compile_cold_s") is not None:
            parts.append(f"compile {record['compile_cold_s']:.1f}s")
        if (record.get("lock_wait_s") or 0) >= 0.05:
            parts.append(f"lock wait {record['lock_wait_s']:.1f}s")
        return " ".join(parts)
    return (record.get("error") or "").splitlines()[0][:100] if record.get("error") else ""


if __name__ == "__main__":
    sys.exit(main())
