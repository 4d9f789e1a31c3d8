"""`python -m benchmarks.sanitize`: suite models' compiled kernels under compute-sanitizer.

Each model runs in its own process under `compute-sanitizer --tool memcheck` (only that
process is instrumented, not ember's compile workers) with PyTorch's caching allocator off, so
that every tensor is its own allocation and a kernel that reads or writes past a buffer's end
is reported, not absorbed by the allocator's pool. The process compiles the model with ember
and runs one inference step and one training step (dropout on) in bf16 autocast, nothing else:
no float64 reference and no eager run, which under memcheck cost more than the model itself
(the suite runner took over 150 s per medium model there). The summary names each model's
error count and the first reports; the full logs stay in `--out`.

    python -m benchmarks.sanitize --models hf_layoutlm,hf_swin --jobs 4 --out DIR
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
DTYPE = "bf16"


def run_model(model: str, size: str, modes: list[str], backend: str) -> None:
    """In the instrumented process: compile `model` with ember and run one step per mode."""
    import torch

    from benchmarks import backends
    from benchmarks.models import build_workload, spec

    backends.ensure_ember_importable()
    compiler = backends.lookup(backends.EMBER_PREFIX + backend)
    if compiler.unavailable is not None:
        raise RuntimeError(compiler.unavailable)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    entry = spec(model)
    for mode in modes:
        workload = build_workload(entry, size, mode, dropout=mode == "training" and entry.dropout)
        module = workload.module.to(device)
        inputs = tuple(t.to(device) for t in workload.inputs)
        compiled = compiler.compile(module)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            if mode == "inference":
                with torch.no_grad():
                    compiled(*inputs)
            else:
                compiled(*inputs).backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(f"[sanitize] {model} {mode}: ran", flush=True)


@dataclass
class Check:
    """One model's sanitizer run: how it ended, what it ran, what memcheck reported."""

    model: str
    exit: int | str
    seconds: float
    steps: int
    errors: int | None  # None: no summary (the process died or timed out under memcheck)
    first: list[str] = field(default_factory=list)
    tail: str = ""


def _sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    candidates = sorted(Path("/usr/local").glob("cuda*/bin/compute-sanitizer"))
    return str(candidates[0]) if candidates else None


def _check(model: str, arguments: argparse.Namespace, sanitizer: str | None) -> Check:
    log = arguments.out / f"{model}.memcheck.log"
    command = [
        sys.executable,
        "-m",
        "benchmarks.sanitize",
        "--one",
        model,
        "--size",
        arguments.size,
        "--modes",
        arguments.modes,
        "--backend",
        arguments.backend,
    ]
    if sanitizer is not None:
        command = [
            sanitizer,
            "--tool",
            "memcheck",
            "--target-processes",
            "application-only",
            "--print-limit",
            "20",
            "--log-file",
            str(log),
            *command,
        ]
    environment = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=arguments.timeout,
            env=environment,
            cwd=Path(__file__).resolve().parent.parent,
        )
        code: int | str = done.returncode
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        code = "timeout"
        output = (expired.stdout or b"").decode() if isinstance(expired.stdout, bytes) else ""
    text = log.read_text(errors="replace") if log.exists() else ""
    counts = [int(n) for n in SUMMARY.findall(text)]
    ran = [line for line in output.splitlines() if line.startswith("[sanitize]")]
    first = [line for line in text.splitlines() if "Invalid" in line or "Program hit" in line]
    return Check(
        model,
        code,
        round(time.monotonic() - started, 1),
        len(ran),
        sum(counts) if counts else (0 if sanitizer is None else None),
        first[:3],
        "" if code == 0 else output[-1500:],
    )


def _write_summary(arguments: argparse.Namespace, results: list[Check], *, done: bool) -> None:
    """Writes `summary.md` for the models checked so far (all of them when `done`)."""
    lines = [
        f"# compute-sanitizer memcheck, {arguments.size} size, {arguments.modes}, ember:"
        f"{arguments.backend}, {DTYPE} autocast, caching allocator off",
        "",
    ]
    if not done:
        total = len(arguments.models.split(","))
        lines += [f"(in progress: {len(results)} of {total} models)", ""]
    lines += [
        "| model | exit | steps run | memcheck errors | s | first report |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        first = "<br>".join(line.strip() for line in result.first) or "–"
        errors = "–" if result.errors is None else str(result.errors)
        lines.append(
            f"| {result.model} | {result.exit} | {result.steps} | {errors} | "
            f"{result.seconds} | {first} |"
        )
    for result in results:
        if result.exit != 0:
            lines += ["", f"## {result.model} (exit {result.exit})", "```", result.tail, "```"]
    (arguments.out / "summary.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sanitize", description=__doc__)
    parser.add_argument("--models", help="comma-separated suite models")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the instrumented child
    parser.add_argument("--size", default="small", help="model size (default: small)")
    parser.add_argument("--modes", default="inference,training")
    parser.add_argument("--backend", default="inductor", help="ember backend (default inductor)")
    parser.add_argument("--jobs", type=int, default=4, help="models at once")
    parser.add_argument("--timeout", type=float, default=600.0, help="s per model")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/sanitize"))
    parser.add_argument(
        "--no-sanitizer", action="store_true", help="run the models without memcheck (a dry run)"
    )
    arguments = parser.parse_args(argv)
    if arguments.one:
        run_model(arguments.one, arguments.size, arguments.modes.split(","), arguments.backend)
        return 0
    if not arguments.models:
        parser.error("--models is required")
    sanitizer = None if arguments.no_sanitizer else _sanitizer()
    if sanitizer is None and not arguments.no_sanitizer:
        print("compute-sanitizer not found", file=sys.stderr)
        return 2
    arguments.out.mkdir(parents=True, exist_ok=True)
    models = arguments.models.split(",")
    from benchmarks.models import SUITE

    unknown = sorted(set(models) - {entry.name for entry in SUITE})
    if unknown:  # before any model runs, not one exit-1 row per misspelled name at the end
        parser.error(f"no such suite model: {', '.join(unknown)} (see benchmarks/models)")
    results: list[Check] = []
    with concurrent.futures.ThreadPoolExecutor(arguments.jobs) as pool:
        pending = [pool.submit(_check, model, arguments, sanitizer) for model in models]
        for future in concurrent.futures.as_completed(pending):
            results.append(future.result())
            # rewritten after every model, so that a run killed at its deadline keeps the
            # models that finished
            _write_summary(arguments, results, done=len(results) == len(models))
    print((arguments.out / "summary.md").read_text())
    clean = all(r.errors == 0 and r.exit == 0 for r in results)
    return 0 if clean or arguments.no_sanitizer else 1


if __name__ == "__main__":
    sys.exit(main())
