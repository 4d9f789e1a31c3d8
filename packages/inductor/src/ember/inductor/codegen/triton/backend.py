"""`TritonBackend`: the Triton implementation of the codegen backend interface (CUDA tensors).

A graph's kernels become one Python module: the prelude (imports and `@triton.jit` helpers),
one `@triton.jit` function per kernel, and `KERNELS`, each kernel's signature and launch
configurations. ember-runtime loads the module from its cache folder, and each kernel from a
file of its own (so that Triton's cache hits for it in every graph), compiles the kernels
(in parallel, cached on disk) and launches them; `max_autotune` benchmarks each kernel's
configurations on its first call and keeps the fastest, `autotune_reductions` each reduction
kernel's (a reduction's best tile depends on its shape and loads).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ember.inductor.codegen.backend import KernelSource
from ember.inductor.codegen.triton.kernel import TritonKernelWriter
from ember.inductor.codegen.triton.kernel_files import kernel_files
from ember.inductor.codegen.triton.ops import PRELUDE, TRITON_TYPES
from ember.inductor.ir.program import Program
from ember.inductor.scheduler.fusion import Kernel
from ember.inductor.templates.gemm import GemmKernel
from ember.inductor.templates.gemm_writer import generate_gemm
from ember.runtime import ArtifactCache


class TritonBackend:
    """Generates Triton for CUDA tensors; one module per graph."""

    capabilities = frozenset({"cuda", "gemm_templates"})
    dtypes = frozenset(TRITON_TYPES)
    # what tl.atomic_add takes (scatter_add of other dtypes falls back)
    atomic_dtypes = frozenset(
        {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64}
    )
    kernel_prefix = "triton"
    split_reductions = True  # one program per output row leaves SMs idle on long rows

    def __init__(self, *, max_autotune: bool = False, autotune_reductions: bool = False) -> None:
        self.max_autotune = max_autotune
        self.autotune_reductions = autotune_reductions

    def generate(self, kernel: Kernel, program: Program) -> KernelSource:
        if isinstance(kernel, GemmKernel):
            return generate_gemm(kernel, program)
        return TritonKernelWriter(kernel, program).generate()

    def module(self, kernels: Sequence[KernelSource]) -> str:
        table = {k.name: k.launch for k in kernels}
        parts = [PRELUDE.strip(), *(k.source for k in kernels), f"KERNELS = {table!r}"]
        return "\n\n\n".join(parts) + "\n"

    def load(self, module: str, cache: ArtifactCache) -> dict[str, Callable[..., None]]:
        # the launcher needs triton, which only GPU installs have
        from ember.inductor.templates.gemm_choice import load_gemm
        from ember.runtime import LaunchConfig, TritonKernel, compile_kernels, load_triton_module

        loaded = load_triton_module(module, cache)
        files = kernel_files(module, loaded.KERNELS)  # the same kernel hits Triton's cache
        kernels: dict[str, TritonKernel] = {}
        choices: dict[str, Callable[..., None]] = {}
        for name, launch in loaded.KERNELS.items():
            if "gemm" in launch:  # a GEMM template: it or cuBLAS, chosen by measurement
                choices[name], parts = load_gemm(
                    module, name, launch, files[name], cache, autotune=self.max_autotune
                )
                kernels.update({f"{name}/{part.name}": part for part in parts})
                continue
            configs = [
                LaunchConfig(
                    tuple(config["constants"].items()),
                    num_warps=config["num_warps"],
                    num_stages=config["num_stages"],
                )
                for config in launch["configs"]
            ]
            kernels[name] = TritonKernel(
                load_triton_module(files[name], cache),
                name,
                signature=launch["signature"],
                configs=configs,
                grid_block="XBLOCK",
                mutated=tuple(launch["mutated"]),
                autotune=self.max_autotune or (self.autotune_reductions and _reduces(launch)),
                cache=cache,
            )
        if kernels and not _interpreting() and torch.cuda.is_available():
            compile_kernels(list(kernels.values()))
        loaded_kernels: dict[str, Callable[..., None]] = {
            name: kernel for name, kernel in kernels.items() if "/" not in name
        }
        return {**loaded_kernels, **choices}

    def pointer(self, tensor: str) -> str:
        return tensor


def _reduces(launch: dict[str, Any]) -> bool:
    """Whether a kernel's launch metadata says it reduces (its configs set RBLOCK)."""
    return any("RBLOCK" in config["constants"] for config in launch["configs"])


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
