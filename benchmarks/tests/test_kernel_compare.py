"""kernel_compare's trace reading and report: kernels attributed to the innermost ATen op
around their launch, classed, per step; the report compares backends row by row."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.kernel_compare import classify, kernels_from_trace, report, short_kernel

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
