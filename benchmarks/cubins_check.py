"""Whether cached cubins may stay on by default: docs/export.md's six conditions, one GPU run.

    source benchmarks/device_env.sh && python -m benchmarks.cubins_check --device cuda
    python -m benchmarks.cubins_check --ddp          # item 6 only, on a 2-GPU machine
    python -m benchmarks.cubins_check --device cpu --models hf_gpt2 --quick   # dry path

Three new processes share one cache directory: `cold` (compiles; keeps the cubins), then
`warm-triton` (`EMBER_INDUCTOR_CACHED_CUBINS=0`) and `warm-cubins` (the default). Each runs
the same cases and prints a RESULT line per case; this process compares them and prints one
verdict per item:
1. the 5-model suite's training steps: both steps' losses bit for bit, warm-cubins against
   warm-triton (and cold against warm-triton: the run-to-run baseline, the same binaries);
2. launch-bound cases (GPT-2 small b1x512 training, ResNet-50 b1 inference): median step
   time, and the microseconds per launch of one small kernel, Triton's launcher against
   `CubinKernel`;
3. a reduce-overhead (CUDA graphs) training step against eager, with the kernels from cubins;
4. a cubin the driver refuses and an offset (unaligned) view, each launched through Triton
   with the same output;
5. per case, how many GPU modules loaded from cubins and why others loaded with Triton;
6. (`--ddp`) a 2-GPU DDP step, cold then warm with and without cubins, loss bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

SUITE = ("hf_resnet", "hf_vit", "hf_gpt2", "hf_bert", "hf_llama")
PHASES = {"cold": None, "warm-triton": "0", "warm-cubins": "1"}
_START = time.perf_counter()


# ---- the child: one process, every case ---------------------------------------------------


def _counters() -> Callable[[], dict[str, Any]]:
    """Clears the cubin counters; the returned function reads them."""
    from ember.inductor.codegen.triton.cubins import LOADS
    from ember.runtime.cubin.kernel import fallbacks

    LOADS.reset()
    fallbacks.clear()
    return lambda: {**LOADS.as_dict(), "kernel_fallbacks": dict(fallbacks)}


def _compile(module: Any, mode: str | None = None) -> Any:
    import ember
    from ember.inductor.backend import inductor  # by object: a source tree has no entry points

    return ember.compile(module, backend=inductor, mode=mode)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _workload(name: str, size: str, mode: str, device: str, batch: int | None = None) -> Any:
    import torch

    from benchmarks.models import build_workload, spec

    workload = build_workload(spec(name), size, mode)
    inputs = tuple(t[:batch].clone() if batch else t for t in workload.inputs)
    torch.manual_seed(0)
    return workload.module.to(device), tuple(t.to(device) for t in inputs)


def training_case(name: str, size: str, device: str, batch: int | None = None,
                  timed_steps: int = 0) -> dict[str, Any]:  # fmt: skip
    """Two training steps (forward, backward, SGD): both losses as exact hex; the first
    step's time; with `timed_steps`, the median time of that many more."""
    import torch

    read = _counters()
    module, inputs = _workload(name, size, "training", device, batch)
    compiled = _compile(module)
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)
    losses: list[str] = []
    times: list[float] = []
    for _ in range(2 + timed_steps):
        begin = time.perf_counter()
        loss = compiled(*inputs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        times.append(time.perf_counter() - begin)
        if len(losses) < 2:
            losses.append(float(loss.detach()).hex())
    row = {"losses": losses, "first_step_s": round(times[0], 3), "loads": read()}
    if timed_steps:
        row["step_ms"] = round(statistics.median(times[2:]) * 1e3, 3)
    return row


def inference_case(name: str, size: str, device: str, batch: int, calls: int) -> dict[str, Any]:
    import torch

    read = _counters()
    module, inputs = _workload(name, size, "inference", device, batch)
    compiled = _compile(module)
    times = []
    with torch.no_grad():
        for _ in range(1 + calls):
            begin = time.perf_counter()
            out = compiled(*inputs)
            _sync(device)
            times.append(time.perf_counter() - begin)
    return {"first_call_s": round(times[0], 3), "step_ms": round(statistics.median(times[1:]) * 1e3, 3),
            "output_sum": float(out.double().sum()).hex(), "loads": read()}  # fmt: skip


def cudagraph_case(name: str, size: str, device: str, steps: int = 4) -> dict[str, Any]:
    """reduce-overhead training against eager on copies of one model: each step's loss and
    the last step's gradients."""
    import copy

    import torch

    read = _counters()
    module, inputs = _workload(name, size, "training", device)
    reference = copy.deepcopy(module)
    compiled = _compile(module, mode="reduce-overhead")
    optimizers = [torch.optim.SGD(m.parameters(), lr=1e-3) for m in (module, reference)]
    differences = []
    for _ in range(steps):
        got, want = compiled(*inputs), reference(*inputs)
        got.backward()
        want.backward()
        differences.append(abs(float(got.detach()) - float(want.detach())))
        if _ != steps - 1:
            for optimizer in optimizers:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    _sync(device)
    gradients = [
        float((a.grad - b.grad).norm() / (b.grad.norm() + 1e-12))
        for a, b in zip(module.parameters(), reference.parameters())
        if a.grad is not None and b.grad is not None
    ]
    scale = max(abs(float(want.detach())), 1e-12)
    return {"loss_rel_diff_max": max(differences) / scale, "grad_rel_err_max": max(gradients),
            "gradients": len(gradients), "loads": read()}  # fmt: skip


def kernel_case(device: str, cache_dir: str) -> dict[str, Any]:
    """One small kernel loaded both ways: microseconds per launch, and the failure paths
    (a cubin the driver refuses; an offset view) against Triton's output."""
    import torch

    import ember.prims as prims
    from ember.inductor.codegen.triton import TritonBackend
    from ember.inductor.codegen.triton.backend import _launches
    from ember.inductor.codegen.triton.cubins import cached_cubin_kernels
    from ember.inductor.config import InductorConfig
    from ember.inductor.pipeline import generate
    from ember.runtime import ArtifactCache
    from ember.runtime.cubin import CubinKernel, CubinVariant
    from ember.runtime.cubin.kernel import fallbacks

    os.makedirs(cache_dir, exist_ok=True)
    cache = ArtifactCache(cache_dir)
    traced = prims.trace(lambda x, y: x * 2 + y, torch.randn(4096), torch.randn(4096))
    module = generate(traced, TritonBackend(), InductorConfig(), torch.device(device))["module"]
    triton: dict[str, Any] = TritonBackend(cached_cubins=False).load(module, cache)  # keeps cubins
    cubins: dict[str, Any] = TritonBackend(cached_cubins=True).load(module, cache)
    name, launch = next(iter(_launches(module).items()))
    row: dict[str, Any] = {"kernel": name, "cubin_type": type(cubins[name]).__name__}

    def arguments(offset: int) -> list[Any]:
        numel = 4096
        made: list[Any] = []
        for kind in launch["signature"].values():
            if kind.startswith("*"):
                torch.manual_seed(len(made))
                made.append(torch.randn(numel + offset, device=device)[offset:])
            else:
                made.append(numel)
        return made

    outputs = [i for i, kind in enumerate(launch["signature"].values()) if kind.startswith("*")]

    def run(kernel: Any, offset: int) -> Any:
        args = arguments(offset)
        kernel(4096, *args)
        _sync(device)
        return [args[i].clone() for i in outputs]

    def same(a: Sequence[Any], b: Sequence[Any]) -> bool:
        return all(torch.equal(x, y) for x, y in zip(a, b))

    # host time per launch: rounds of 400 launches (fewer than the driver's queue holds, so
    # no launch waits for the GPU), timed without waiting, interleaved; the median round
    args = arguments(0)
    per_launch: dict[str, list[float]] = {"triton": [], "cubin": []}
    for _ in range(30):
        for path, kernel in (("triton", triton[name]), ("cubin", cubins[name])):
            _sync(device)
            begin = time.perf_counter()
            for _ in range(400):
                kernel.launch(4096, *args)
            per_launch[path].append((time.perf_counter() - begin) / 400 * 1e6)
    _sync(device)
    row["us_per_launch"] = {p: round(statistics.median(t[5:]), 3) for p, t in per_launch.items()}
    row["aligned_equal"] = same(run(triton[name], 0), run(cubins[name], 0))

    fallbacks.clear()  # an offset view: 4 bytes past 16-byte alignment
    row["unaligned_equal"] = same(run(triton[name], 1), run(cubins[name], 1))
    row["unaligned_fallbacks"] = dict(fallbacks)

    fallbacks.clear()  # a cubin the driver refuses, at launch...
    real = cubins[name]
    refused = CubinKernel(name, list(launch["signature"].items()), real.block,
                          CubinVariant(b"not a cubin", "nothing", 4, 0),
                          fallback=lambda: triton[name])  # fmt: skip
    row["refused_equal"] = same(run(triton[name], 0), run(refused, 0))
    row["refused_fallbacks"] = dict(fallbacks)
    # ... and when the index is read: the whole module loads with Triton
    key = TritonBackend()._cubin_key(module)
    assert key is not None
    index = json.loads(cache.get(key) or b"{}")
    garbage = ArtifactCache.key(b"not a cubin", config={}, versions={})
    cache.put(garbage, b"not a cubin")
    for entry in index["kernels"].values():
        entry["cubin"] = garbage
    damaged = ArtifactCache.key(b"damaged index", config={}, versions={})
    cache.put(damaged, json.dumps(index).encode())
    found, why = cached_cubin_kernels(cache, damaged, _no_fallback, torch.cuda.current_device())
    row["refused_index"] = {"loaded_with_triton": found is None, "why": why[:200]}
    return row


def _no_fallback(name: str, launch: Any) -> Callable[..., None]:
    raise AssertionError(f"{name}: a refused index must not build a launch")


def child(phase: str, options: argparse.Namespace) -> None:
    """Every case in this process, a RESULT line each (a failing case is a row, not a stop)."""
    import torch

    cases: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    for name in options.models.split(","):
        cases.append(
            (f"suite {name}", lambda n=name: training_case(n, options.size, options.device))
        )
    if options.device == "cuda":
        cases.append(
            ("cudagraphs hf_gpt2 small", lambda: cudagraph_case("hf_gpt2", options.size, "cuda"))
        )
    if not options.quick:
        cases += [
            ("launch-bound hf_gpt2 gpu b1 training",
             lambda: training_case("hf_gpt2", "gpu", options.device, batch=1, timed_steps=30)),
            ("launch-bound hf_resnet gpu b1 inference",
             lambda: inference_case("hf_resnet", "gpu", options.device, batch=1, calls=50)),
        ]  # fmt: skip
    if options.device == "cuda" and phase == "warm-cubins":  # last: it imports triton
        folder = os.path.join(os.environ["EMBER_CACHE_DIR"], "kernel-case")
        cases.append(("one kernel", lambda: kernel_case("cuda", folder)))
    for case, run in cases:
        begin = time.perf_counter()
        try:
            row = run()
        except Exception:  # noqa: BLE001
            row = {"error": traceback.format_exc(limit=8)[-1500:]}
        row.update(case=case, phase=phase, case_s=round(time.perf_counter() - begin, 2),
                   triton_imported=sys.modules.get("triton") is not None)  # fmt: skip
        print("RESULT " + json.dumps(row), flush=True)
        if options.device == "cuda":
            torch.cuda.empty_cache()
    gpu = torch.cuda.get_device_name() if options.device == "cuda" else "cpu"
    print("RESULT " + json.dumps({"case": "process", "phase": phase, "gpu": gpu,
                                  "torch": torch.__version__}), flush=True)  # fmt: skip


# ---- DDP (item 6) --------------------------------------------------------------------------


def ddp_rank(rank: int, world: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        read = _counters()
        module, inputs = _workload("hf_gpt2", "small", "training", "cuda")
        model = DistributedDataParallel(module, device_ids=[rank])
        compiled = _compile(model)
        optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)
        losses = []
        for _ in range(2):
            loss = compiled(*inputs)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()).hex())
        torch.cuda.synchronize()
        row = {"rank": rank, "losses": losses, "loads": read()}
    except Exception as error:  # noqa: BLE001
        row = {"rank": rank, "error": f"{type(error).__name__}: {error}"[-1200:]}
    with open(f"{out}.{rank}", "w") as file:
        file.write(json.dumps(row))
    dist.destroy_process_group()


def ddp_child(phase: str) -> None:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = os.path.join(os.environ["EMBER_CACHE_DIR"], f"ddp-{phase}")
    mp.spawn(ddp_rank, args=(2, port, out), nprocs=2, join=True)
    for rank in range(2):
        with open(f"{out}.{rank}") as file:
            print("RESULT " + json.dumps({"case": f"ddp rank {rank}", "phase": phase,
                                          **json.loads(file.read())}), flush=True)  # fmt: skip


# ---- the parent: three processes, then the verdicts ---------------------------------------


def run_phases(options: argparse.Namespace, cache: str) -> list[dict[str, Any]]:
    from benchmarks.export_warm_start import _environment

    rows: list[dict[str, Any]] = []
    for phase, flag in PHASES.items():
        environment = {**_environment(), "EMBER_CACHE_DIR": cache,
                       "TRITON_CACHE_DIR": os.path.join(cache, "triton")}  # fmt: skip
        environment.pop("EMBER_INDUCTOR_CACHED_CUBINS", None)
        if flag is not None:
            environment["EMBER_INDUCTOR_CACHED_CUBINS"] = flag
        command = [sys.executable, "-m", "benchmarks.cubins_check", "_child", phase,
                   *options.argv] if not options.ddp else [
                   sys.executable, "-m", "benchmarks.cubins_check", "_ddp", phase]  # fmt: skip
        left = options.budget - (time.perf_counter() - _START)
        if phase == "cold":  # the warm starts' verdicts need time of their own
            left -= 2 * options.reserve
        if left < 10:
            rows.append({"case": "process", "phase": phase, "error": "skipped: --budget spent"})
            continue
        begin = time.perf_counter()
        try:
            result = subprocess.run(command, capture_output=True, text=True, env=environment,
                                    timeout=left)  # fmt: skip
            stdout, stderr, failed = result.stdout, result.stderr, result.returncode != 0
        except subprocess.TimeoutExpired as expired:
            stdout = (
                expired.stdout.decode()
                if isinstance(expired.stdout, bytes)
                else (expired.stdout or "")
            )
            stderr, failed = f"timed out after {left:.0f} s (--budget)", True
        found = [json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT ")]
        rows += found
        for row in found:  # as they come: a run cut short still says what it measured
            brief = {k: v for k, v in row.items() if k not in ("phase", "case", "error")}
            print(
                f"  {phase:<11} {row.get('case')}: {row.get('error', '')[-300:]} {brief}",
                flush=True,
            )
        print(f"[{time.perf_counter() - _START:6.1f} s] {phase}: {len(found)} rows in "
              f"{time.perf_counter() - begin:.1f} s", flush=True)  # fmt: skip
        if failed:
            rows.append({"case": "process", "phase": phase, "error": stderr[-1500:]})
            print(f"  {phase} process failed: {stderr[-800:]}", flush=True)
    return rows


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """One block of lines per item, each ending in PASS, FAIL or UNKNOWN."""
    by = {(r.get("phase"), r.get("case")): r for r in rows}
    cases = list(dict.fromkeys(r["case"] for r in rows if r.get("case") != "process"))
    lines: list[str] = []

    def get(phase: str, case: str) -> dict[str, Any]:
        return by.get((phase, case), {"error": "no row"})

    # item 1
    equal_all, known = True, False
    lines.append("item 1 same numbers (losses of steps 1 and 2, exact):")
    for case in cases:
        if not (
            case.startswith("suite") or case.startswith("launch-bound") or case.startswith("ddp")
        ):
            continue
        triton, cubins, cold = get("warm-triton", case), get("warm-cubins", case), get("cold", case)
        key = "losses" if "losses" in triton else "output_sum"
        if key not in triton or key not in cubins:
            lines.append(
                f"  {case:<40} UNKNOWN ({(triton.get('error') or cubins.get('error') or '')[:300]})"
            )
            continue
        known = True
        equal = triton[key] == cubins[key]
        equal_all &= equal
        baseline = (
            "cold==triton-warm"
            if cold.get(key) == triton[key]
            else "cold!=triton-warm (run-to-run)"
        )
        values = [
            float.fromhex(v)
            for v in (cubins[key] if isinstance(cubins[key], list) else [cubins[key]])
        ]
        lines.append(f"  {case:<40} {'equal' if equal else 'DIFFERENT'} {values} [{baseline}]")
    lines.append(f"  item 1: {'PASS' if equal_all and known else 'FAIL' if known else 'UNKNOWN'}")

    # item 2
    lines.append("item 2 launch overhead (median step, warm-triton vs warm-cubins):")
    slower = []
    for case in cases:
        if case.startswith("launch-bound"):
            t, c = get("warm-triton", case).get("step_ms"), get("warm-cubins", case).get("step_ms")
            if t and c:
                slower.append(c / t)
                lines.append(
                    f"  {case:<40} triton {t:.3f} ms  cubins {c:.3f} ms  ratio {c / t:.3f}"
                )
            else:
                lines.append(f"  {case:<40} UNKNOWN")
    kernel = get("warm-cubins", "one kernel")
    if "us_per_launch" in kernel:
        us = kernel["us_per_launch"]
        slower.append(us["cubin"] / us["triton"])
        lines.append(f"  one small kernel ({kernel['kernel']}): triton {us['triton']:.2f} us/launch, "
                     f"cubin {us['cubin']:.2f} us/launch ({kernel['cubin_type']})")  # fmt: skip
    verdict = "UNKNOWN" if not slower else "PASS" if max(slower) <= 1.03 else "FAIL"
    lines.append(
        f"  item 2: {verdict} (worst cubins/triton ratio {max(slower, default=0):.3f}; pass <= 1.03)"
    )

    # item 3
    graphs = get("warm-cubins", "cudagraphs hf_gpt2 small")
    if "grad_rel_err_max" in graphs:
        ok = graphs["loss_rel_diff_max"] < 1e-4 and graphs["grad_rel_err_max"] < 1e-3
        ok = ok and graphs["loads"]["cubins"] > 0
        lines.append(f"item 3 reduce-overhead training vs eager, from cubins: loss rel diff "
                     f"{graphs['loss_rel_diff_max']:.2e}, grad rel err {graphs['grad_rel_err_max']:.2e} "
                     f"over {graphs['gradients']} grads, loads {graphs['loads']}")  # fmt: skip
        lines.append(
            f"  item 3: {'PASS' if ok else 'FAIL'} (loss < 1e-4, grads < 1e-3, some cubins)"
        )
    else:
        lines.append(f"item 3: UNKNOWN ({graphs.get('error', '')[:400]})")

    # item 4
    if "refused_equal" in kernel:
        refused_index = kernel["refused_index"]["loaded_with_triton"]
        ok = (kernel["aligned_equal"] and kernel["unaligned_equal"] and kernel["refused_equal"]
              and refused_index and kernel["unaligned_fallbacks"].get("unaligned", 0) > 0
              and kernel["refused_fallbacks"].get("load failed", 0) > 0)  # fmt: skip
        lines.append(f"item 4 failure paths: aligned equal {kernel['aligned_equal']}, offset view "
                     f"equal {kernel['unaligned_equal']} {kernel['unaligned_fallbacks']}, refused "
                     f"cubin equal {kernel['refused_equal']} {kernel['refused_fallbacks']}, "
                     f"refused at index read -> Triton {refused_index} ({kernel['refused_index']['why'][:120]})")  # fmt: skip
        lines.append(f"  item 4: {'PASS' if ok else 'FAIL'}")
    else:
        lines.append(f"item 4: UNKNOWN ({kernel.get('error', '')[:400]})")

    # item 5
    lines.append("item 5 coverage (warm-cubins: modules from cubins / with Triton, why):")
    for case in cases:
        loads = get("warm-cubins", case).get("loads")
        if loads:
            lines.append(f"  {case:<40} cubins {loads['cubins']} ({loads['kernels']} kernels), "
                         f"triton {loads['triton']} {loads['reasons']} {loads['kernel_fallbacks']}")  # fmt: skip
    lines.append(
        "  item 5: REPORTED (Triton-loaded modules above are what the flag cannot speed up)"
    )

    # item 6
    ddp = [case for case in cases if case.startswith("ddp")]
    if ddp:
        fine = all(get("warm-cubins", c).get("loads", {}).get("cubins", 0) > 0 for c in ddp)
        same_numbers = all(
            get("warm-cubins", c).get("losses") == get("warm-triton", c).get("losses") is not None
            for c in ddp
        )
        lines.append(f"  item 6 (DDP, 2 GPUs): {'PASS' if fine and same_numbers else 'FAIL'} "
                     "(both ranks from cubins, losses equal to warm-triton)")  # fmt: skip

    # warm first steps (the 2 s target is export_warm_start's GPT-2 b8x512; these show the gain)
    lines.append("warm first step (s), warm-triton -> warm-cubins:")
    for case in cases:
        t, c = get("warm-triton", case), get("warm-cubins", case)
        field = "first_step_s" if "first_step_s" in t else "first_call_s"
        if field in t and field in c:
            lines.append(f"  {case:<40} {t[field]:.3f} -> {c[field]:.3f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_ddp"]:
        ddp_child(argv[1])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--models", default=",".join(SUITE))
    parser.add_argument("--size", default="small")
    parser.add_argument("--quick", action="store_true", help="the suite cases only")
    parser.add_argument("--ddp", action="store_true", help="item 6 only (2 GPUs)")
    parser.add_argument("--out", default="", help="write the rows here (JSON lines)")
    parser.add_argument("--budget", type=float, default=280, help="seconds for all processes")
    parser.add_argument(
        "--reserve", type=float, default=50, help="seconds the cold process leaves each warm one"
    )
    if argv[:1] == ["_child"]:
        child(argv[1], parser.parse_args(argv[2:]))
        return
    options = parser.parse_args(argv)
    options.argv = argv
    with tempfile.TemporaryDirectory(prefix="ember-cubins-check-") as cache:
        rows = run_phases(options, cache)
    if options.out:
        with open(options.out, "w") as file:
            file.write("".join(json.dumps(row) + "\n" for row in rows))
    else:
        for row in rows:
            print("JSON " + json.dumps(row), flush=True)
    errors = [r for r in rows if "error" in r]
    for row in errors:
        print(f"ERROR {row.get('phase')} {row.get('case')}: {row['error'][-700:]}", flush=True)
    devices = {r["phase"]: f"{r['gpu']} torch {r['torch']}" for r in rows if "gpu" in r}
    print(f"devices: {devices}; {len(rows)} rows, {len(errors)} errors", flush=True)
    print("\n".join(verdicts(rows)), flush=True)
    print(f"total {time.perf_counter() - _START:.1f} s", flush=True)


if __name__ == "__main__":
    main()
