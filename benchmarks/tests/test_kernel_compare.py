"""kernel_compare's trace reading, report and runner: kernels attributed to the innermost ATen
op around their launch, classed, per step; the report compares backends row by row and gives
each compiler's geomean speedup per mode; the runner splits workers per model and mode, kills
them at the budget and records what they left."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.kernel_compare import (
    classify,
    graph_launches,
    kernels_from_trace,
    marked_step,
    mode_argument,
    parser,
    short_kernel,
    step_marker,
    trace_events,
)
from benchmarks.kernel_compare_report import load, report, speedups, summary
from benchmarks.kernel_compare_runner import Unit, plan, run_all, worker_command

GEMM = (
    "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>"
    "(cutlass_75_tensorop::Params)"
)


def _trace(path: Path) -> Path:
    events = [
        {"cat": "cpu_op", "name": "aten::linear", "dur": 80, "args": {"External id": 1}},
        {"cat": "cpu_op", "name": "aten::mm", "dur": 50, "args": {"External id": 1}},
        {"cat": "cpu_op", "name": "## Call CompiledFxGraph ##", "dur": 900, "args": {"External id": 2}},
        {"cat": "kernel", "name": GEMM, "dur": 3300, "args": {"External id": 1}},
        {"cat": "kernel", "name": "triton_poi_fused__to_copy_0", "dur": 40, "args": {"External id": 2}},
        {"cat": "kernel", "name": "triton_fused_amax_sub_exp_sum_3", "dur": 60, "args": {}},
        {"cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "dur": 10, "args": {}},
        {"cat": "cpu_op", "name": "aten::mm", "dur": 50, "args": {"External id": 3}},
        {"cat": "kernel", "name": GEMM, "dur": 3300, "args": {"External id": 3}},
    ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_kernels_are_attributed_classed_and_averaged(tmp_path: Path) -> None:
    kernels = kernels_from_trace(_trace(tmp_path / "trace.json"), steps=2)
    by_name = {k["kernel"]: k for k in kernels}
    gemm = by_name[short_kernel(GEMM)]
    assert gemm["op"] == "aten::mm"  # the innermost op, not aten::linear
    assert gemm["class"] == "matmul" and gemm["calls_per_step"] == 1.0
    assert abs(gemm["ms_per_step"] - 3.3) < 1e-9
    assert "align1" in gemm["kernel"] and "Params" not in gemm["kernel"]
    cast = by_name["triton_poi_fused__to_copy_0"]
    assert cast["op"] == "" and cast["class"] == "generated cast"  # a record_function names no op
    assert by_name["triton_fused_amax_sub_exp_sum_3"]["class"] == "generated reduction"
    assert by_name["Memcpy DtoD"]["class"] == "copy"
    assert kernels[0]["kernel"] == gemm["kernel"]  # slowest first


def test_casts_of_both_compilers_are_casts() -> None:
    assert classify("triton_poi_fused__to_copy_12", "") == "generated cast"  # torch.compile
    assert classify("triton_fused__to_copy_3fa9c01b2d4e5f60", "") == "generated cast"  # ember
    assert classify("triton_fused_convert_element_type_0123456789abcdef", "") == "generated cast"
    assert classify("triton_fused__to_copy_add_3fa9c01b2d4e5f60", "") == "generated pointwise"


def test_classes_of_library_kernels() -> None:
    assert classify("cudnn::engines_precompiled::nchwToNhwcKernel", "aten::cudnn_convolution") == (
        "layout conversion"
    )
    assert classify("sm90_xmma_fprop_implicit_gemm", "aten::cudnn_convolution") == "convolution"
    assert classify("at::native::vectorized_elementwise_kernel", "aten::add") == "other ATen"


def test_report_sets_backends_side_by_side(tmp_path: Path) -> None:
    kernels = kernels_from_trace(_trace(tmp_path / "trace.json"), steps=1)
    records = [
        {"model": "m", "mode": "inference", "backend": backend, "status": "ok", "gpu_ms": ms,
         "wall_ms": ms, "peak_mib": 100.0, "kernels": kernels}
        for backend, ms in (("eager", 8.0), ("torch.compile", 2.0), ("ember", 3.0))
    ]  # fmt: skip
    records.append({"model": "m", "mode": "training", "backend": "ember", "status": "error",
                    "error": "RuntimeError: boom"})  # fmt: skip
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(r) for r in records))
    text = report([results], {"device": "H100"})
    assert "| m | inference | 8.00 | 2.00 | 3.00 | 1.50x |" in text
    assert "device H100" in text and "m training ember: RuntimeError: boom" in text
    assert "| matmul | 6.600 | 6.600 | 6.600 |" in text


def test_replayed_graph_kernels_are_counted_and_classed(tmp_path: Path) -> None:
    # under CUDA graphs kernels come from cudaGraphLaunch: no ATen op around them
    events = [
        {"cat": "cuda_runtime", "name": "cudaGraphLaunch", "dur": 5, "args": {"External id": 7}},
        {"cat": "kernel", "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "dur": 900,
         "args": {"External id": 7}},
        {"cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>(int)",
         "dur": 100, "args": {"External id": 7}},
        {"cat": "cuda_runtime", "name": "cudaGraphLaunch", "dur": 5, "args": {"External id": 8}},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 5, "args": {}},
    ]  # fmt: skip
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert graph_launches(trace_events(path), steps=2) == 1.0
    classes = {k["kernel"][:5]: k["class"] for k in kernels_from_trace(path, steps=1)}
    assert classes == {"nvjet": "matmul", "at::n": "other ATen"}
    # cuDNN's attention kernels without their op (not "cudnn" convolutions)
    assert classify("cudnn::fusion::compute_dot_do_o_specialized<true>", "") == "attention"
    assert classify("sm90_xmma_fprop_implicit_gemm_bf16bf16", "") == "convolution"


def test_compile_mode_reaches_both_compilers_and_workers(tmp_path: Path) -> None:
    assert mode_argument("default") is None  # as today: no mode passed
    assert mode_argument("max-autotune") == "max-autotune"
    args = parser().parse_args([])
    assert (args.compile_mode, args.split_modes) == ("default", False)
    with pytest.raises(SystemExit):
        parser().parse_args(["--compile-mode", "fastest"])
    args = parser().parse_args(["--compile-mode", "max-autotune", "--split-modes"])
    command = worker_command(args, Unit("hf_gpt2", ("training",)), tmp_path, tmp_path / "lock")
    assert command[command.index("--compile-mode") + 1] == "max-autotune"
    assert command[command.index("--modes") + 1] == "training"


def test_cuda_graph_modes_mark_each_step_of_the_compilers() -> None:
    import ember

    assert step_marker("torch.compile", "default") is None
    assert step_marker("eager", "max-autotune") is None
    assert (
        step_marker("torch.compile", "reduce-overhead") is torch.compiler.cudagraph_mark_step_begin
    )
    assert step_marker("ember", "max-autotune") is ember.cudagraph_mark_step_begin
    calls: list[str] = []
    step = marked_step(lambda: calls.append("step"), lambda: calls.append("mark"))
    step()
    step()
    assert calls == ["mark", "step", "mark", "step"]
    plain = lambda: None  # noqa: E731
    assert marked_step(plain, None) is plain


def _case(model: str, mode: str, backend: str, wall: float, **extra: object) -> dict:
    return {"model": model, "mode": mode, "backend": backend, "status": "ok",
            "compile_mode": "max-autotune", "wall_ms": wall, "gpu_ms": wall / 2,
            "peak_mib": 10.0, "kernels": [], **extra}  # fmt: skip


def test_speedups_are_geomeans_per_mode_with_first_calls_side_by_side(tmp_path: Path) -> None:
    records = [
        _case("a", "inference", "eager", 8.0),
        _case("a", "inference", "torch.compile", 4.0, compile_s=30.0, graph_launches_per_step=1.0),
        _case("a", "inference", "ember", 2.0, compile_s=10.0, graph_launches_per_step=1.0),
        _case("b", "inference", "eager", 9.0),
        _case("b", "inference", "torch.compile", 1.0, compile_s=20.0),
        _case("b", "inference", "ember", 3.0, compile_s=5.0),
        _case("a", "training", "eager", 10.0),
        _case("a", "training", "torch.compile", 5.0, compile_s=60.0),
        _case("a", "training", "ember", 4.0, compile_s=40.0),
        _case("b", "training", "eager", 10.0),
        _case("b", "training", "torch.compile", 5.0, compile_s=60.0),
        {"model": "b", "mode": "training", "backend": "ember", "status": "killed",
         "compile_mode": "max-autotune", "error": "killed at the budget (500 s) in this case"},
    ]  # fmt: skip
    lines = speedups(records)
    assert lines[0] == "## Speedup over eager, compile mode max-autotune"
    # tc: sqrt(2 * 9) = 4.24; ember: sqrt(4 * 3) = 3.46; first calls summed
    assert "| inference | 2 of 2 | 4.24x | 3.46x | 0.82x | 4.24x | 3.46x | 50.0 | 15.0 |" in lines
    assert "| training | 1 of 2 | 2.00x | 2.50x | 1.25x | 2.00x | 2.50x | 60.0 | 40.0 |" in lines
    assert "| b | training | 10.00 | 5.00 | killed | 2.00x | – | 60.0 | – | – | – |" in lines
    assert "| a | inference | 8.00 | 4.00 | 2.00 | 2.00x | 4.00x | 30.0 | 10.0 | 1 | 1 |" in lines
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(r) for r in records))
    text = summary(load([results]), {"compile mode": "max-autotune"})
    assert "| a | inference, max-autotune | 4.00 | 2.00 | 1.00 |" in text  # the mode says it
    assert "compile mode max-autotune" in text
    assert "- b training, max-autotune ember: killed: killed at the budget" in text
    assert "Top kernels" not in text and "Top kernels" in report([results])


# A worker stand-in: records eager first, then the compilers, in its own process; "slow"
# sleeps through the budget after eager, "crash" exits after eager.
STAND_IN = """
import json, os, sys, time
model, modes, out = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
for mode in modes:
    for backend, wall in (("eager", 8.0), ("torch.compile", 4.0), ("ember", 2.0)):
        record = {"model": model, "mode": mode, "backend": backend, "status": "ok",
                  "wall_ms": wall, "gpu_ms": wall, "kernels": [], "pid": os.getpid(),
                  "compile_mode": "max-autotune", "compile_s": 1.0}
        with open(os.path.join(out, "results.jsonl"), "a") as stream:
            stream.write(json.dumps(record) + "\\n")
        print(f"{model} {mode} {backend} done", flush=True)
        if model == "slow":
            time.sleep(120)
        if model == "crash":
            sys.exit(3)
"""


def _stand_in(args: argparse.Namespace, unit: Unit, out: Path, lock: Path) -> list[str]:
    return [sys.executable, "-c", STAND_IN, unit.model, ",".join(unit.modes), str(out)]


def test_runner_splits_modes_kills_at_the_budget_and_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["--models", "fast,slow,crash", "--split-modes", "--jobs", "2", "--budget", "8",
                 "--compile-mode", "max-autotune", "--out", str(tmp_path / "out")]  # fmt: skip
    args = parser().parse_args(arguments)
    assert [u.name for u in plan(args)][:3] == ["fast-training", "slow-training", "crash-training"]
    results = run_all(args, command=_stand_in)
    found = {(r["model"], r["mode"], r["backend"]): r for r in load([results])}
    # one process per model and mode, eager first in each
    pids = {(m, mode): r["pid"] for (m, mode, b), r in found.items() if b == "eager" and "pid" in r}
    assert pids[("fast", "inference")] != pids[("fast", "training")] != os.getpid()
    for (model, mode, backend), record in found.items():
        if backend != "eager" and "pid" in record:
            assert record["pid"] == pids[(model, mode)]
    assert found[("fast", "training", "ember")]["status"] == "ok"
    slow = found[("slow", "training", "torch.compile")]
    assert slow["status"] == "killed" and "in this case" in slow["error"]
    assert "slow training eager done" in slow["error"]  # the worker's last line
    assert found[("slow", "training", "ember")]["error"] == "not started before the budget"
    lost = found[("crash", "training", "ember")]
    assert lost["status"] == "lost" and "exit 3" in lost["error"]
    # with two jobs and both slow workers holding them, crash-inference never started
    assert found[("crash", "inference", "eager")]["error"] == "not started before the budget"
    assert sorted(os.listdir(tmp_path / "out")) == [
        "environment.json", "kernels.md", "results.jsonl", "workers.log",
    ]  # fmt: skip
    assert "==== slow-training: killed at the budget" in (tmp_path / "out/workers.log").read_text()
    printed = capsys.readouterr().out
    assert "| training | 1 of 3 | 2.00x | 4.00x | 2.00x |" in printed
    assert printed.rstrip().endswith("not started before the budget")


# A worker stand-in for `--split-backends`: records only the backends its command names.
SPLIT_STAND_IN = """
import json, os, sys, time
model, mode, backends, out = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4]
for backend in backends:
    if backend == "torch.compile" and model == "slow":
        time.sleep(120)  # autotuning through the budget
    wall = {"eager": 8.0, "torch.compile": 4.0, "ember": 2.0}[backend]
    record = {"model": model, "mode": mode, "backend": backend, "status": "ok",
              "wall_ms": wall, "gpu_ms": wall, "kernels": [], "pid": os.getpid(),
              "compile_mode": "max-autotune", "compile_s": 1.0}
    with open(os.path.join(out, "results.jsonl"), "a") as stream:
        stream.write(json.dumps(record) + "\\n")
"""


def _split_stand_in(args: argparse.Namespace, unit: Unit, out: Path, lock: Path) -> list[str]:
    command = worker_command(args, unit, out, lock)
    backends = command[command.index("--backends") + 1]
    return [sys.executable, "-c", SPLIT_STAND_IN, unit.model, unit.modes[0], backends, str(out)]


def test_split_backends_runs_each_compiler_in_its_own_worker(tmp_path: Path) -> None:
    arguments = ["--models", "fast,slow", "--modes", "inference", "--split-backends",
                 "--jobs", "6", "--budget", "6", "--noreuse-modes", "inference",
                 "--out", str(tmp_path / "out")]  # fmt: skip
    args = parser().parse_args(arguments)
    units = plan(args)
    # torch.compile's workers first (they autotune longest), eager's last
    assert [u.name for u in units] == [
        "fast-inference-torch_compile", "slow-inference-torch_compile",
        "fast-inference-ember", "slow-inference-ember",
        "fast-inference-ember-noreuse", "slow-inference-ember-noreuse",
        "fast-inference-eager", "slow-inference-eager",
    ]  # fmt: skip
    command = worker_command(args, units[2], tmp_path, tmp_path / "lock")
    assert command[command.index("--backends") + 1] == "ember"
    assert command[command.index("--noreuse-modes") + 1] == ""  # its own worker runs that
    noreuse = arguments.index("--noreuse-modes")
    args = parser().parse_args(arguments[:noreuse] + arguments[noreuse + 2 :])
    results = run_all(args, command=_split_stand_in)
    found = {(r["model"], r["backend"]): r for r in load([results])}
    assert len({found[("fast", b)]["pid"] for b in ("eager", "torch.compile", "ember")}) == 3
    # slow's torch.compile autotunes past the budget: its ember still finished
    assert found[("slow", "torch.compile")]["status"] == "killed"
    assert found[("slow", "ember")]["status"] == "ok"


def test_a_compilers_worker_takes_eagers_first_step_as_its_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import benchmarks.kernel_compare as kernel_compare

    calls: list[tuple[str, bool]] = []

    def fake_measure(model, mode, dtype, backend, args, hold, reference, paused=None, timed=True):  # type: ignore[no-untyped-def]
        calls.append((backend, timed))
        if backend == "eager":
            reference[mode] = torch.ones(3)
        else:
            assert torch.equal(reference[mode], torch.ones(3))
        return {"model": model, "mode": mode, "backend": backend}

    monkeypatch.setattr(kernel_compare, "measure", fake_measure)
    args = parser().parse_args(["--worker", "m", "--modes", "training", "--backends", "ember",
                                "--out", str(tmp_path), "--lock", str(tmp_path / "lock")])  # fmt: skip
    kernel_compare.worker(args)
    assert calls == [("eager", False), ("ember", True)]
    backends = [json.loads(line)["backend"] for line in (tmp_path / "results.jsonl").open()]
    assert backends == ["ember"]
