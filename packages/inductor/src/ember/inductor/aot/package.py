"""Writing an ahead-of-time package: `aot_compile(program, path, targets=...)`.

The program's flat Graph (`ExportedProgram.flat_graph`) goes through inductor's pipeline
up to generated source, with the choices a package cannot carry turned off (autotuning picks
launch configs at run time; GEMM templates choose against cuBLAS by timing). Then:

- CPU: the C++ module is compiled into one shared library (`-march=native`: it runs on CPUs
  like the one that built it; the plan records the machine).
- CUDA: each Triton kernel's first launch config is compiled for every target GPU
  architecture (`targets=[90]`; default the current GPU's), aligned and unaligned variants,
  and the cubins are kept with the launch data Triton's metadata gives (function name,
  warps, shared memory, scratch size). Building needs Triton but no GPU.

`aot/plan.json` holds the wrapper source, extern targets, versions and each binary's file
name and sha256; binaries are named by their sha256.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ember.inductor.aot.load import PLAN_FILE, PLAN_FORMAT, AotPackageError, package_versions
from ember.inductor.config import InductorConfig
from ember.inductor.lowering.graph_lowering import compute_device
from ember.inductor.pipeline import backend_for, generate
from ember.prims import ExportedProgram, write_atomically
from ember.prims.config import load
from ember.runtime import ArtifactCache

AOT_FOLDER = "aot"


def has_package(path: str | os.PathLike[str]) -> bool:
    """Whether the program folder at `path` holds an ahead-of-time package."""
    return (Path(path) / AOT_FOLDER / PLAN_FILE).is_file()


def aot_compile(
    program: ExportedProgram,
    path: str | os.PathLike[str],
    *,
    targets: Sequence[int] | None = None,
    options: dict[str, Any] | None = None,
) -> Path:
    """Save `program` at `path` with its compiled kernels and wrapper plan; returns the
    folder. `targets` are CUDA architectures (90 for an H100) for a GPU program."""
    folder = program.save(path)
    flat = program.flat_graph()
    overrides = {
        "max_autotune": False,
        "autotune_reductions": False,
        "gemm_templates": False,
        "conv_templates": False,
    }
    config = dataclasses.replace(load(InductorConfig), **{**overrides, **(options or {})})
    device = compute_device(flat)
    backend = backend_for(device, config)
    artifact = generate(flat, backend, config, device)
    plan: dict[str, Any] = {
        "format": "ember-aot",
        "version": PLAN_FORMAT,
        "device": device.type,
        "versions": package_versions(),
        "machine": platform.machine(),
        "wrapper": artifact["wrapper"],
        "targets": artifact["targets"],
        "kernel_count": artifact["kernels"],
    }
    binaries: dict[str, bytes] = {}
    if artifact["kernels"] and device.type == "cpu":
        from ember.inductor.codegen.cpp.compiler import compile_shared_library

        library = compile_shared_library(artifact["module"])
        plan["library"] = _binary(binaries, library, ".so")
        plan["exports"] = _exported_functions(artifact["module"])
        plan["cpu"] = _cpu_model()
    elif artifact["kernels"]:
        plan["gpus"] = _cubins(artifact["module"], backend, _targets(targets), binaries)
    elif device.type not in ("cpu", "cuda"):
        raise AotPackageError(f"ahead-of-time packages hold CPU or CUDA programs, not {device}")
    directory = folder / AOT_FOLDER
    for name, payload in binaries.items():
        write_atomically(directory / name, payload)
    write_atomically(directory / PLAN_FILE, json.dumps(plan, indent=1).encode())
    return folder


def _binary(binaries: dict[str, bytes], payload: bytes, suffix: str) -> dict[str, str]:
    digest = hashlib.sha256(payload).hexdigest()
    binaries[digest + suffix] = payload
    return {"file": digest + suffix, "sha256": digest}


def _exported_functions(module: str) -> dict[str, list[str]]:
    """Each `extern "C"` kernel of a C++ module and its parameter kinds ("pointer"/"int")."""
    functions: dict[str, list[str]] = {}
    prefix = 'extern "C" void '
    for line in module.splitlines():
        if line.startswith(prefix):
            name, params = line[len(prefix) :].split("(", 1)
            functions[name] = [
                "pointer" if p.strip().startswith("void*") else "int"
                for p in params.rstrip(") {").split(",")
                if p.strip()
            ]
    return functions


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _targets(targets: Sequence[int] | None) -> list[int]:
    if targets:
        return [int(target) for target in targets]
    if not torch.cuda.is_available():
        raise AotPackageError(
            "a CUDA program's package needs target GPU architectures when no GPU is visible: "
            "aot_compile(..., targets=[90]) for an H100"
        )
    major, minor = torch.cuda.get_device_capability()
    return [major * 10 + minor]


def _cubins(
    module: str, backend: Any, targets: list[int], binaries: dict[str, bytes]
) -> dict[str, Any]:
    from triton.backends.compiler import GPUTarget

    from ember.runtime import TritonKernel, compile_kernels
    from ember.runtime.cubin.kernel import supported_type

    kernels = backend.load(module, ArtifactCache())
    gpus: dict[str, Any] = {}
    for arch in targets:
        target = GPUTarget("cuda", arch, 32)
        launched = [kernel for kernel in kernels.values() if isinstance(kernel, TritonKernel)]
        # both variants of every kernel, in compile workers; the loop below hits the cache
        compile_kernels(launched, target, aligned=(True, False))
        table: dict[str, Any] = {}
        for name, kernel in kernels.items():
            if not isinstance(kernel, TritonKernel):
                raise AotPackageError(
                    f"kernel {name} is a GEMM template chosen by timing at run time; package "
                    "without gemm_templates and conv_templates"
                )
            unsupported = [kind for _, kind in kernel.signature if not supported_type(kind)]
            if unsupported:
                raise AotPackageError(
                    f"kernel {name} takes {unsupported}, which packages cannot launch"
                )
            config = kernel.configs[0]
            variants = {}
            for aligned in (True, False):
                compiled = kernel.compile(config, aligned=aligned, target=target)
                metadata = compiled.metadata
                if getattr(metadata, "profile_scratch_size", 0):
                    raise AotPackageError(
                        f"kernel {name} was compiled with profiling scratch memory"
                    )
                variants["aligned" if aligned else "unaligned"] = {
                    **_binary(binaries, compiled.asm["cubin"], ".cubin"),
                    "function": metadata.name,
                    "num_warps": int(metadata.num_warps),
                    "shared": int(metadata.shared),
                    "global_scratch_size": int(getattr(metadata, "global_scratch_size", 0) or 0),
                    "global_scratch_align": int(getattr(metadata, "global_scratch_align", 1) or 1),
                }
            table[name] = {
                "signature": [list(pair) for pair in kernel.signature],
                "block": int(dict(config.constants)[kernel.grid_block]),
                "variants": variants,
            }
        gpus[f"sm_{arch}"] = {"kernels": table, "triton": _triton_version()}
    return gpus


def _triton_version() -> str:
    module = sys.modules.get("triton")
    return str(getattr(module, "__version__", "?"))
