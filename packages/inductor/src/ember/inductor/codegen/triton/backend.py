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

import ast
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ember.inductor.codegen.backend import (
    CHANNELS_LAST_CONVOLUTIONS,
    HORIZONTAL_LAUNCHES,
    MIXED_ORDER_REDUCTIONS,
    KernelSource,
)
from ember.inductor.codegen.triton.cubins import (
    LOADS,
    cached_cubin_kernels,
    index_key,
    store_cubins,
)
from ember.inductor.codegen.triton.horizontal import can_be_part, generate_horizontal
from ember.inductor.codegen.triton.kernel import TritonKernelWriter
from ember.inductor.codegen.triton.kernel_files import kernel_files
from ember.inductor.codegen.triton.mixed_order import MixedOrderWriter
from ember.inductor.codegen.triton.ops import PRELUDE, TRITON_TYPES
from ember.inductor.codegen.triton.transposed_tiles import TransposedTileWriter, transposed_tiles
from ember.inductor.ir.program import Program
from ember.inductor.scheduler.fusion import Kernel
from ember.inductor.scheduler.horizontal import HorizontalKernel
from ember.inductor.scheduler.mixed_order_reductions import MixedOrderKernel
from ember.inductor.templates.gemm import GemmKernel
from ember.inductor.templates.gemm_writer import generate_gemm
from ember.runtime import ArtifactCache

logger = logging.getLogger("ember.inductor")


class TritonBackend:
    """Generates Triton for CUDA tensors; one module per graph."""

    capabilities = frozenset(
        {
            "cuda",
            "gemm_templates",
            CHANNELS_LAST_CONVOLUTIONS,
            MIXED_ORDER_REDUCTIONS,
            HORIZONTAL_LAUNCHES,
        }
    )
    dtypes = frozenset(TRITON_TYPES)
    # what tl.atomic_add takes (scatter_add of other dtypes falls back)
    atomic_dtypes = frozenset(
        {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64}
    )
    kernel_prefix = "triton"
    split_reductions = True  # one program per output row leaves SMs idle on long rows
    welford_reductions = True  # variances as welford_m2 reductions, float32 (kernel.py)

    def __init__(
        self,
        *,
        max_autotune: bool = False,
        autotune_reductions: bool = False,
        cached_cubins: bool = True,
    ) -> None:
        self.max_autotune = max_autotune
        self.autotune_reductions = autotune_reductions
        self.cached_cubins = cached_cubins  # a warm start launches cubins without Triton

    def generate(self, kernel: Kernel, program: Program) -> KernelSource:
        if isinstance(kernel, HorizontalKernel):
            return generate_horizontal(kernel, program)
        if isinstance(kernel, GemmKernel):
            return generate_gemm(kernel, program)
        if isinstance(kernel, MixedOrderKernel):
            return MixedOrderWriter(kernel, program).generate()
        tiles = transposed_tiles(kernel)
        if tiles is not None:  # loads and stores contiguous along different loops
            return TransposedTileWriter(kernel, program, tiles).generate()
        return TritonKernelWriter(kernel, program).generate()

    def horizontal_part(self, kernel: Kernel, program: Program) -> bool:
        """Whether `kernel` (a pointwise kernel reading only inputs) can run as a part of a
        horizontal launch (`HORIZONTAL_LAUNCHES`)."""
        return can_be_part(kernel, program)

    def module(self, kernels: Sequence[KernelSource]) -> str:
        table = {k.name: k.launch for k in kernels}
        parts = [PRELUDE.strip(), *(k.source for k in kernels), f"KERNELS = {table!r}"]
        return "\n\n\n".join(parts) + "\n"

    def load(self, module: str, cache: ArtifactCache) -> dict[str, Callable[..., None]]:
        key = self._cubin_key(module)
        why = "EMBER_INDUCTOR_CACHED_CUBINS=0"
        if key is not None and self.cached_cubins:
            device = torch.cuda.current_device()  # where Triton would load them too
            found, why = cached_cubin_kernels(cache, key, self._fallback(module, cache), device)
            if found is not None:
                LOADS.record(len(found))
                return found
        kernels = self._load(module, cache)
        if key is not None:
            from ember.runtime import cuda_target

            try:  # a warm start's shortcut: never worth failing a compile over
                stored = store_cubins(cache, key, kernels, _launches(module), cuda_target())
            except Exception as error:  # noqa: BLE001
                logger.debug("cubins of a module not cached: %s", error)
                stored = False
            if not stored:
                why = "not indexable (an autotuned kernel, a GEMM template or profile scratch)"
            LOADS.record(None, why)
        return kernels

    def _cubin_key(self, module: str) -> str | None:
        """The key of the module's cached cubins, on a real GPU (None otherwise)."""
        if _interpreting() or not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        autotune = {
            "max_autotune": self.max_autotune,
            "autotune_reductions": self.autotune_reductions,
        }
        return index_key(module, major * 10 + minor, autotune)

    def _fallback(
        self, module: str, cache: ArtifactCache
    ) -> Callable[[str, Mapping[str, Any]], Callable[..., None]]:
        def triton_launch(name: str, launch: Mapping[str, Any]) -> Callable[..., None]:
            kernel = self._triton_kernel(name, launch, kernel_files(module, [name])[name], cache)
            return lambda numel, *args: kernel.launch(numel, *args)  # its bound fast path, later

        return triton_launch

    def _triton_kernel(
        self, name: str, launch: Mapping[str, Any], source: str, cache: ArtifactCache
    ) -> Any:
        from ember.runtime import LaunchConfig, TritonKernel, load_triton_module

        configs = [
            LaunchConfig(
                tuple(config["constants"].items()),
                num_warps=config["num_warps"],
                num_stages=config["num_stages"],
            )
            for config in launch["configs"]
        ]
        return TritonKernel(
            load_triton_module(source, cache),
            name,
            signature=launch["signature"],
            configs=configs,
            grid_block="XBLOCK",
            mutated=tuple(launch["mutated"]),
            autotune=self.max_autotune or (self.autotune_reductions and _reduces(launch)),
            cache=cache,
        )

    def _load(self, module: str, cache: ArtifactCache) -> dict[str, Callable[..., None]]:
        # the launcher needs triton, which only GPU installs have
        from ember.inductor.templates.gemm_choice import load_gemm
        from ember.runtime import TritonKernel, compile_kernels, load_triton_module

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
            kernels[name] = self._triton_kernel(name, launch, files[name], cache)
        if kernels and not _interpreting() and torch.cuda.is_available():
            compile_kernels(list(kernels.values()))
        loaded_kernels: dict[str, Callable[..., None]] = {
            name: kernel for name, kernel in kernels.items() if "/" not in name
        }
        return {**loaded_kernels, **choices}

    def pointer(self, tensor: str) -> str:
        return tensor


def _launches(module: str) -> dict[str, Any]:
    """The module's `KERNELS` table (plain data), read without importing the module."""
    for node in ast.parse(module).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "KERNELS" for target in node.targets
        ):
            table: dict[str, Any] = ast.literal_eval(node.value)
            return table
    return {}


def _reduces(launch: Mapping[str, Any]) -> bool:
    """Whether a kernel's launch metadata says it reduces (its configs set RBLOCK)."""
    return any("RBLOCK" in config["constants"] for config in launch["configs"])


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
