"""Kernels run through `TritonKernel` under `TRITON_INTERPRET=1` on CPU tensors and match torch,
whether the module was imported before the variable was set or after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from ember.runtime import (  # noqa: E402
    ArtifactCache,
    KernelArgumentError,
    KernelSignatureError,
    LaunchConfig,
    TritonInterpreterError,
    TritonKernel,
    load_triton_module,
)

from .kernels import POINTWISE, POINTWISE_SIGNATURE, REDUCTION, REDUCTION_SIGNATURE  # noqa: E402


def _pointwise(cache: ArtifactCache, source: str = POINTWISE) -> TritonKernel:
    return TritonKernel(
        load_triton_module(source, cache),
        "add_kernel",
        signature=POINTWISE_SIGNATURE,
        configs=[LaunchConfig((("XBLOCK", 32),)), LaunchConfig((("XBLOCK", 64),))],
        grid_block="XBLOCK",
        mutated=("out_ptr0",),
        autotune=True,  # the interpreter always takes configs[0]
        cache=cache,
        bench=_no_bench,
    )


def _no_bench(launch: object) -> float:
    raise AssertionError("the interpreter must not autotune")


def test_pointwise_matches_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # set already by conftest.py on CPU machines
    kernel = _pointwise(ArtifactCache(tmp_path))
    x, y = torch.randn(100), torch.randn(100)
    out = torch.full((100,), float("nan"))
    kernel(100, x, y, out, 100)
    torch.testing.assert_close(out, x * 2 + y)
    kernel(70, x, y, out[:70], 70)  # a second call, other sizes: the same launch, no specializing
    torch.testing.assert_close(out, x * 2 + y)
    assert kernel.autotuner.benchmarked == 0


def _row_sum(cache: ArtifactCache) -> TritonKernel:
    return TritonKernel(
        load_triton_module(REDUCTION, cache),
        "row_sum_kernel",
        signature=REDUCTION_SIGNATURE,
        configs=[LaunchConfig((("XBLOCK", 4), ("RBLOCK", 64)))],
        grid_block="XBLOCK",
        cache=cache,
    )


_LATE_SCRIPT = """
import os, sys, torch
sys.path.insert(0, sys.argv[1])
import triton  # imported while TRITON_INTERPRET=0: triton's own library is compiled-mode
from kernels import POINTWISE, POINTWISE_SIGNATURE, REDUCTION, REDUCTION_SIGNATURE
from ember.runtime import ArtifactCache, LaunchConfig, TritonInterpreterError, TritonKernel
from ember.runtime import load_triton_module
cache = ArtifactCache(sys.argv[2])
pointwise = TritonKernel(load_triton_module(POINTWISE, cache), "add_kernel",
    signature=POINTWISE_SIGNATURE, configs=[LaunchConfig((("XBLOCK", 32),))], grid_block="XBLOCK",
    cache=cache)
row_sum = TritonKernel(load_triton_module(REDUCTION, cache), "row_sum_kernel",
    signature=REDUCTION_SIGNATURE, configs=[LaunchConfig((("XBLOCK", 4), ("RBLOCK", 64)))],
    grid_block="XBLOCK", cache=cache)
os.environ["TRITON_INTERPRET"] = "1"  # set at call time, after the modules were imported
x, y, out = torch.randn(50), torch.randn(50), torch.zeros(50)
pointwise(50, x, y, out, 50)  # its module is imported again, under the interpreter
torch.testing.assert_close(out, x * 2 + y)
try:
    row_sum(6, torch.randn(6, 20), torch.zeros(6), 6, 20)  # tl.sum was defined compiled-mode
except TritonInterpreterError as error:
    print("explained:", error)
"""


def test_interpreter_switched_on_at_call_time(tmp_path: Path) -> None:
    environment = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    here = str(Path(__file__).resolve().parent)
    result = subprocess.run(
        [sys.executable, "-c", _LATE_SCRIPT, here, str(tmp_path)],
        capture_output=True,
        text=True,
        env=environment,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.startswith("explained:")
    assert "before the process imports triton" in result.stdout


def test_reduction_matches_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernel = _row_sum(ArtifactCache(tmp_path))
    x, out = torch.randn(6, 20), torch.zeros(6)
    if isinstance(tl.standard.sum, InterpretedFunction):  # this process interprets from the start
        kernel(6, x, out, 6, 20)
        torch.testing.assert_close(out, x.sum(1))
    else:
        with pytest.raises(TritonInterpreterError, match="before the process imports triton"):
            kernel(6, x, out, 6, 20)


def test_bad_arguments_name_the_parameter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernel = _pointwise(ArtifactCache(tmp_path))
    x = torch.randn(8)
    with pytest.raises(KernelArgumentError, match="'in_ptr1' is a pointer and needs a tensor"):
        kernel(8, x, 3, x, 8)
    with pytest.raises(KernelArgumentError, match="takes 4 arguments after numel"):
        kernel(8, x, x, x)


def test_signature_must_cover_every_parameter(tmp_path: Path) -> None:
    module = load_triton_module(POINTWISE, ArtifactCache(tmp_path))
    with pytest.raises(KernelSignatureError, match="give every non-constexpr parameter a type"):
        TritonKernel(
            module,
            "add_kernel",
            signature={"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i64"},
            configs=[LaunchConfig((("XBLOCK", 32),))],
            grid_block="XBLOCK",
        )
    with pytest.raises(KernelSignatureError, match="no grid block 'RBLOCK'"):
        TritonKernel(
            module,
            "add_kernel",
            signature=POINTWISE_SIGNATURE,
            configs=[LaunchConfig((("XBLOCK", 32),))],
            grid_block="RBLOCK",
        )
