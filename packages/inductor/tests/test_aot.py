"""Ahead-of-time packages on the CPU: `aot_compile` writes the wrapper plan and one shared
library; a fresh process with `import triton` blocked and no C++ compiler on PATH loads and
runs it equal to eager; a package for another torch, machine or with a damaged library is
refused with an error saying what to do."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ember.inductor.aot import AotPackageError, aot_compile, has_package, load_package
from ember.prims import ExportedProgram, GraphInput, InputKind, TreeSpec, trace
from ember.prims.serialize.safetensors import dumps_tensors


def _program() -> ExportedProgram:
    torch.manual_seed(0)
    weight = torch.randn(8, 16)

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w.t()).softmax(-1) * 3 + x.sum()

    traced = trace(fn, torch.randn(4, 16), weight)
    graph = dataclasses.replace(
        traced,
        inputs=[traced.inputs[0], GraphInput(traced.inputs[1].value, InputKind.PARAMETER, "w")],
        in_spec=TreeSpec("tuple", (TreeSpec("tuple", (TreeSpec("leaf"),)), TreeSpec("dict"))),
        input_leaves=[traced.input_leaves[0]],
    )
    return ExportedProgram(graph, {"w": weight})


LOADER = textwrap.dedent(
    """
    import importlib.util, os, sys
    sys.modules["triton"] = None  # as if not installed: import raises, find_spec says None
    assert importlib.util.find_spec("triton") is None
    import torch
    from ember.inductor.aot import load_package
    from ember.prims.serialize.safetensors import loads_tensors
    folder = sys.argv[1]
    data, _ = loads_tensors(open(os.path.join(folder, "io.safetensors"), "rb").read())
    program, compiled = load_package(folder)
    flat = program.flat_arguments((data["x"],), {}, program.state)
    (got,) = compiled(*flat)
    torch.testing.assert_close(got, data["expected"])
    assert not any(m.split(".")[0] == "triton" for m, v in sys.modules.items() if v is not None)
    print("AOT-OK", compiled.kernel_count)
    """
)


def test_cpu_package_runs_without_triton_or_a_compiler(tmp_path: Path) -> None:
    program = _program()
    folder = aot_compile(program, tmp_path / "pkg")
    assert has_package(folder)
    x = torch.randn(4, 16)
    expected = (torch.nn.functional.gelu(x @ program.state["w"].t()).softmax(-1) * 3) + x.sum()
    (folder / "io.safetensors").write_bytes(dumps_tensors({"x": x, "expected": expected}))
    environment = {**os.environ, "PATH": str(tmp_path / "nothing"), "CXX": "/nonexistent/g++"}
    result = subprocess.run(
        [sys.executable, "-c", LOADER, str(folder)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    kernels = int(result.stdout.split("AOT-OK")[1].split()[0])
    assert kernels > 0  # the package's own C++ kernels ran, not only extern ops


def _edit_plan(folder: Path, **changes: object) -> None:
    path = folder / "aot" / "plan.json"
    plan = json.loads(path.read_text())
    plan.update(changes)
    path.write_text(json.dumps(plan))


def test_packages_from_another_torch_or_machine_are_refused(tmp_path: Path) -> None:
    folder = aot_compile(_program(), tmp_path / "pkg")
    plan = json.loads((folder / "aot" / "plan.json").read_text())
    _edit_plan(folder, versions={**plan["versions"], "torch": "1.0.0"})
    with pytest.raises(AotPackageError, match=r"built with torch 1\.0\.0"):
        load_package(folder)
    _edit_plan(folder, versions=plan["versions"], machine="sparc64")
    with pytest.raises(AotPackageError, match="built on sparc64"):
        load_package(folder)


def test_damaged_library_is_refused(tmp_path: Path) -> None:
    folder = aot_compile(_program(), tmp_path / "pkg")
    library = next((folder / "aot").glob("*.so"))
    library.write_bytes(library.read_bytes()[:-16])
    with pytest.raises(AotPackageError, match="damaged"):
        load_package(folder)


CUDA_PACKAGE = textwrap.dedent(
    """
    import dataclasses, json, sys, torch
    from ember.inductor.aot import AotPackageError, aot_compile, load_package
    from ember.prims import ExportedProgram, GraphInput, InputKind, TensorSpec, TreeSpec, Value, trace
    cuda = torch.device("cuda", 0)
    def on_cuda(value):
        return Value(value.name, dataclasses.replace(value.spec, device=cuda))
    weight = torch.randn(8, 16)
    traced = trace(lambda x, w: torch.nn.functional.gelu(x @ w.t()).softmax(-1), torch.randn(4, 16), weight)
    for node in traced.nodes:  # the same program as a CUDA one: no GPU is needed to build it
        node.outputs = [on_cuda(o) if isinstance(o, Value) else o for o in node.outputs]
    graph = dataclasses.replace(
        traced,
        inputs=[GraphInput(on_cuda(traced.inputs[0].value)),
                GraphInput(on_cuda(traced.inputs[1].value), InputKind.PARAMETER, "w")],
        in_spec=TreeSpec("tuple", (TreeSpec("tuple", (TreeSpec("leaf"),)), TreeSpec("dict"))),
        input_leaves=[traced.input_leaves[0]],
    )
    folder = aot_compile(ExportedProgram(graph, {"w": weight}), sys.argv[1], targets=[90, 80])
    plan = json.loads((folder / "aot" / "plan.json").read_text())
    try:
        load_package(folder)
    except AotPackageError as error:
        print("REFUSED", error)
    print("PLAN " + json.dumps(plan["gpus"]))
    """
)


def test_cuda_packages_build_cubins_per_target_without_a_gpu(tmp_path: Path) -> None:
    environment = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", CUDA_PACKAGE, str(tmp_path / "pkg")],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REFUSED the package holds CUDA kernels, but this process sees no GPU" in result.stdout
    gpus = json.loads(result.stdout.split("PLAN ", 1)[1])
    assert sorted(gpus) == ["sm_80", "sm_90"]
    for arch in gpus.values():
        assert arch["kernels"]
        for kernel in arch["kernels"].values():
            assert all(
                kind.startswith("*") or kind in ("i32", "i64") for _, kind in kernel["signature"]
            )
            for variant in kernel["variants"].values():
                cubin = (tmp_path / "pkg" / "aot" / variant["file"]).read_bytes()
                assert cubin[:4] == b"\x7fELF" and variant["num_warps"] >= 1
