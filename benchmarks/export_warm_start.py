"""Export, ahead-of-time packages and warm starts, measured in fresh processes (issue 22).

    python -m benchmarks.export_warm_start roundtrip --size small --device cpu
    python -m benchmarks.export_warm_start aot --model hf_gpt2 --size small --device cuda
    python -m benchmarks.export_warm_start warm --model hf_gpt2 --size gpu --device cuda

`roundtrip`: per model of the 5-model suite, one process builds the workload (transformers,
random weights), exports it and saves the program, its inputs and eager's output; a second
process that imports neither transformers nor benchmarks loads the program and runs it with
the interpreter and with inductor, and compares with eager.
`aot`: the same, through `ember.aot_compile`; the loading process blocks `import triton`
and runs with PATH and CXX pointing at nothing, so no compiler can run.
`warm`: the first training step (forward, backward, SGD step) of a model in a new process,
twice with one cache directory (cold, then warm), for ember and for torch.compile, with the
time of each ember stage (capture, autodiff, inductor) taken from the stage functions.
Prints one line per measurement and a JSON line per case.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SUITE = ("hf_resnet", "hf_vit", "hf_gpt2", "hf_bert", "hf_llama")
_DEADLINE: list[float] = []  # perf_counter() by which every child must have ended (--deadline)


def _limit(timeout: float) -> float:
    """A child's time limit: `timeout`, or what is left before the deadline."""
    if not _DEADLINE:
        return timeout
    return min(timeout, _DEADLINE[0] - time.perf_counter())


ROOT = Path(__file__).resolve().parent.parent

# The loading process: ember and torch only (and, for `aot`, no triton and no compilers).
LOADER = r"""
import json, os, sys, time
mode, device, backends, folders = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4:]
if mode == "aot":
    # triton as if not installed: `import triton` raises ImportError and find_spec answers
    # None (torch's CUDA init asks find_spec whether triton exists; a finder that raises
    # there breaks torch.cuda itself, as the first H100 run at 05:45 showed)
    sys.modules["triton"] = None
    os.environ["PATH"] = "/nonexistent"
    os.environ["CXX"] = "/nonexistent/c++"
started = time.perf_counter()
import torch
import ember
from ember.prims.serialize.safetensors import loads_tensors
for folder in folders:
    data, meta = loads_tensors(open(os.path.join(folder, "io.safetensors"), "rb").read())
    inputs = [data[f"input{i}"].to(device) for i in range(int(meta["inputs"]))]
    expected = data["expected"].to(device)
    rows = []
    for backend in backends:
        begin = time.perf_counter()
        try:
            program = ember.load_exported(folder, backend=None if backend == "aot" else backend)
            loaded = time.perf_counter() - begin
            with torch.no_grad():
                got = program(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
        except Exception as error:
            rows.append({"backend": backend, "error": f"{type(error).__name__}: {error}"[-1500:]})
            continue
        first = time.perf_counter() - begin - loaded
        error = (got.float() - expected.float()).abs().max().item()
        scale = expected.float().abs().max().item()
        rows.append({"backend": backend, "load_s": round(loaded, 3), "first_call_s": round(first, 3),
                     "max_abs_error": error, "max_abs_expected": scale,
                     "ran_as": program.backend_name})
    foreign = sorted({m.split(".")[0] for m, v in sys.modules.items() if v is not None and m.split(".")[0] in
                      ("transformers", "benchmarks", "triton", "timm")})
    print("RESULT " + json.dumps({"folder": folder, "rows": rows, "foreign_modules": foreign,
                                 "process_s": round(time.perf_counter() - started, 3)}), flush=True)
"""


def _environment() -> dict[str, str]:
    paths = [str(ROOT / "src"), *(str(p) for p in sorted((ROOT / "packages").glob("*/src")))]
    existing = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": ":".join([*paths, existing] if existing else paths),
            "PYTHONUNBUFFERED": "1"}  # fmt: skip


def export_case(name: str, size: str, device: str, folder: str, aot: bool) -> dict[str, Any]:
    """Build the workload, export it (and package it with `aot`), save inputs and eager's
    output beside it. Runs in the exporting process."""
    import torch

    import ember
    from benchmarks.models import build_workload, spec
    from ember.prims.serialize.safetensors import dumps_tensors

    workload = build_workload(spec(name), size, "inference")
    module = workload.module.to(device)
    inputs = tuple(t.to(device) for t in workload.inputs)
    with torch.no_grad():
        expected = module(*inputs)
        started = time.perf_counter()
        program = ember.export(module, inputs)
        exported = time.perf_counter() - started
    started = time.perf_counter()
    if aot:
        ember.aot_compile(program, folder)
    else:
        program.save(folder)
    saved = time.perf_counter() - started
    tensors = {f"input{i}": t.cpu() for i, t in enumerate(inputs)}
    tensors["expected"] = expected.detach().cpu()
    io = dumps_tensors(tensors, {"inputs": str(len(inputs))})
    Path(folder, "io.safetensors").write_bytes(io)
    return {"export_s": round(exported, 3), "save_s": round(saved, 3),
            "nodes": len(program.graph.nodes), "state": len(program.state)}  # fmt: skip


def _run_child(command: list[str], timeout: float) -> list[dict[str, Any]]:
    """The RESULT lines of a child process, or one row with its error output."""
    timeout = _limit(timeout)
    if timeout < 5:
        return [{"error": "skipped: the --deadline has passed"}]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, env=_environment(), timeout=timeout, cwd=ROOT
        )
    except subprocess.TimeoutExpired as expired:  # keep what finished before the limit
        output = expired.stdout or b""
        text = output.decode(errors="replace") if isinstance(output, bytes) else output
        done = [json.loads(line[7:]) for line in text.splitlines() if line.startswith("RESULT ")]
        return [*done, {"error": f"timed out after {timeout:.0f} s"}]
    rows = [
        json.loads(line[7:]) for line in result.stdout.splitlines() if line.startswith("RESULT ")
    ]
    if result.returncode != 0 or not rows:
        rows.append({"error": (result.stderr or result.stdout)[-1500:]})
    return rows


def roundtrip(models: list[str], size: str, device: str, backends: str, aot: bool,
              timeout: float, together: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """Each model exported in one process and loaded and run in another (with `together`,
    one exporting and one loading process serve all models: faster on the CPU; on a GPU a
    crash would take the other models down with it)."""
    mode = "aot" if aot else "load"
    results: list[dict[str, Any]] = []
    groups = [models] if together else [[name] for name in models]
    with tempfile.TemporaryDirectory(prefix="ember-export-") as root:
        for group in groups:
            folders = [os.path.join(root, name) for name in group]
            exporter = [sys.executable, "-m", "benchmarks.export_warm_start", "_export",
                        size, device, mode, *[f"{n}={f}" for n, f in zip(group, folders)]]  # fmt: skip
            exported = {row.get("folder"): row for row in _run_child(exporter, timeout)}
            ready = [f for f in folders if f in exported and "error" not in exported[f]]
            loaded: dict[str | None, dict[str, Any]] = {}
            if ready:
                loader = [sys.executable, "-c", LOADER, mode, device, backends, *ready]
                loaded = {row.get("folder"): row for row in _run_child(loader, timeout)}
            for name, folder in zip(group, folders):
                if folder not in exported or "error" in exported[folder]:
                    error = exported.get(folder, exported.get(None, {})).get(
                        "error", "not exported"
                    )
                    row = {"model": name, "mode": mode, "error": error}
                elif folder not in loaded:
                    error = loaded.get(None, {}).get("error", "not loaded")
                    row = {"model": name, "mode": mode, **exported[folder], "error": error}
                else:
                    row = {"model": name, "mode": mode, **exported[folder], **loaded[folder]}
                results.append(row)
                print(_summary(row), flush=True)
                print("JSON " + json.dumps(row), flush=True)
    return results


def _summary(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['model']:<10} {row['mode']:<5} ERROR {row['error'][-600:]}"
    parts = [f"{row['model']:<10} {row['mode']:<5} export {row['export_s']:.2f}s "
             f"save {row['save_s']:.2f}s nodes {row['nodes']} foreign {row['foreign_modules']}"]  # fmt: skip
    for r in row.get("rows", []):
        if "error" in r:
            parts.append(f"  {r['backend']:<9} ERROR {r['error'][-600:]}")
            continue
        parts.append(f"  {r['backend']:<9} as {r['ran_as']:<9} load {r['load_s']:.3f}s first "
                     f"{r['first_call_s']:.3f}s max|err| {r['max_abs_error']:.3g} (|y| {r['max_abs_expected']:.3g})")  # fmt: skip
    return "\n".join(parts)


# ---- warm start ---------------------------------------------------------------------------


def first_step(name: str, size: str, device: str, backend: str) -> dict[str, Any]:
    """One training step in this (fresh) process; times the first step and ember's stages."""
    started = time.perf_counter()
    import torch

    from benchmarks.models import build_workload, spec

    imported = time.perf_counter() - started
    workload = build_workload(spec(name), size, "training")
    module = workload.module.to(device)
    inputs = tuple(t.to(device) for t in workload.inputs)
    stages: dict[str, float] = {}
    if backend == "ember":
        import ember

        _time_stages(stages)
        from ember.inductor.backend import inductor  # by object: a source tree has no entry points

        compiled = ember.compile(module, backend=inductor)
    else:
        compiled = torch.compile(module)
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)
    begin = time.perf_counter()
    loss = compiled(*inputs)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    step = time.perf_counter() - begin
    begin = time.perf_counter()
    loss = compiled(*inputs)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
    second = time.perf_counter() - begin
    loads: dict[str, Any] = {}
    if backend == "ember" and device == "cuda":  # GPU modules from cached cubins or with Triton
        from ember.inductor.codegen.triton.cubins import LOADS

        loads = LOADS.as_dict()
    return {"first_step_s": round(step, 3), "second_step_s": round(second, 4), "cubin_loads": loads,
            "import_s": round(imported, 3), "stages_s": {k: round(v, 3) for k, v in stages.items()},
            "loss": float(loss.detach()), "triton_imported": sys.modules.get("triton") is not None}  # fmt: skip


def _time_stages(stages: dict[str, float]) -> None:
    """Accumulate the wall time of capture, autodiff and inductor's compile in `stages`
    (the benchmark wraps the stage functions; product code is unchanged)."""
    import importlib

    # modules, not the functions of the same name their packages export
    aot_module = importlib.import_module("ember.autodiff.aot")
    translate = importlib.import_module("ember.capture.translate")
    compile_module = importlib.import_module("ember.capture.compile")
    backend_module = importlib.import_module("ember.inductor.backend")

    children: list[float] = []  # per open stage: the time of the stages it called

    def timed(label: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            begin = time.perf_counter()
            children.append(0.0)
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - begin
                own = elapsed - children.pop()
                stages[label] = stages.get(label, 0.0) + own
                if children:
                    children[-1] += elapsed

        return wrapper

    # inductor's compile_graph runs inside autodiff's aot, which runs inside capture (the
    # backward compiles at the first backward): each stage counts its own time only.
    compile_module.capture_call = timed("capture", translate.capture_call)
    backend_module.compile_graph = timed("inductor", backend_module.compile_graph)
    wrapped = timed("autodiff", aot_module.aot)
    aot_module.aot = wrapped
    importlib.import_module("ember.autodiff").aot = wrapped


def warm(
    name: str, size: str, device: str, backends: list[str], timeout: float
) -> list[dict[str, Any]]:
    """Cold then warm first step in new processes sharing one cache directory per backend."""
    rows = []
    for backend in backends:
        with tempfile.TemporaryDirectory(prefix=f"warm-{backend}-") as cache:
            # ember's warm start loads with Triton (EMBER_INDUCTOR_CACHED_CUBINS=0), its third
            # launches the cached cubins (the default)
            attempts = (
                ("cold", "warm", "warm-cubins")
                if backend == "ember" and device == "cuda"
                else ("cold", "warm")
            )
            for attempt in attempts:
                command = [sys.executable, "-m", "benchmarks.export_warm_start", "_step",
                           name, size, device, backend]  # fmt: skip
                environment = {"EMBER_CACHE_DIR": cache, "TORCHINDUCTOR_CACHE_DIR": cache,
                               "TRITON_CACHE_DIR": os.path.join(cache, "triton"),
                               "EMBER_INDUCTOR_CACHED_CUBINS": str(int(attempt == "warm-cubins"))}  # fmt: skip
                begin = time.perf_counter()
                limit = _limit(timeout)
                parsed: dict[str, Any] = {"error": "skipped: the --deadline has passed"}
                try:
                    if limit >= 5:
                        result = subprocess.run(
                            command, capture_output=True, text=True, cwd=ROOT, timeout=limit,
                            env={**_environment(), **environment},
                        )  # fmt: skip
                        parsed = {"error": (result.stderr or result.stdout)[-1500:]}
                        for line in result.stdout.splitlines():
                            if line.startswith("RESULT "):
                                parsed = json.loads(line[len("RESULT ") :])
                except subprocess.TimeoutExpired:
                    parsed = {"error": f"timed out after {limit:.0f} s"}
                process = time.perf_counter() - begin
                row = {"model": name, "backend": backend, "start": attempt,
                       "process_s": round(process, 2), **parsed}  # fmt: skip
                rows.append(row)
                print(_warm_summary(row), flush=True)
                print("JSON " + json.dumps(row), flush=True)
    return rows


def _warm_summary(row: dict[str, Any]) -> str:
    if "first_step_s" not in row:
        return f"{row['model']} {row['backend']:<6} {row['start']}: ERROR {row['error'][-400:]}"
    own = row.get("stages_s", {})
    return (f"{row['model']} {row['backend']:<6} {row['start']}: first step {row['first_step_s']:.2f}s "
            f"(second {row['second_step_s'] * 1e3:.1f} ms) process {row['process_s']:.1f}s "
            f"stages {own} triton imported {row.get('triton_imported')} loss {row.get('loss', 0):.4f}"
            + (f" modules {row['cubin_loads']}" if row.get("cubin_loads") else ""))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_export":
        size, device, mode = argv[1:4]
        for pair in argv[4:]:
            name, folder = pair.split("=", 1)
            try:
                row = export_case(name, size, device, folder, mode == "aot")
            except Exception as error:  # noqa: BLE001 - the next model still runs
                row = {"error": f"{type(error).__name__}: {error}"[-1500:]}
            print("RESULT " + json.dumps({"folder": folder, **row}), flush=True)
        return
    if argv and argv[0] == "_step":
        name, size, device, backend = argv[1:5]
        print("RESULT " + json.dumps(first_step(name, size, device, backend)))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("roundtrip", "aot", "warm"))
    parser.add_argument("--models", default=",".join(SUITE))
    parser.add_argument("--model", default="hf_gpt2")
    parser.add_argument("--size", default="small")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backends", default=None)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument(
        "--together", action="store_true", help="one process per side for all models"
    )
    parser.add_argument("--deadline", type=float, default=None, help="seconds all children get")
    args = parser.parse_args(argv)
    if args.deadline is not None:
        _DEADLINE.append(time.perf_counter() + args.deadline)
    if args.command == "roundtrip":
        roundtrip(args.models.split(","), args.size, args.device,
                  args.backends or "eager,inductor", False, args.timeout, args.together)  # fmt: skip
    elif args.command == "aot":
        roundtrip(args.model.split(","), args.size, args.device, "aot", True, args.timeout,
                  args.together)  # fmt: skip
    else:
        warm(args.model, args.size, args.device, (args.backends or "ember,torch").split(","),
             args.timeout)  # fmt: skip


if __name__ == "__main__":
    main()
