"""`CppBackend`: the C++/OpenMP implementation of the codegen backend interface."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from importlib import metadata

from ember.inductor.codegen.backend import (
    CHANNELS_LAST_CONVOLUTIONS,
    CHANNELS_LAST_DEPTHWISE,
    ONE_REDUCTION_DIRECTION,
    KernelSource,
)
from ember.inductor.codegen.cpp import probe_cache
from ember.inductor.codegen.cpp.compiler import FLAGS, compile_shared_library, compiler_version
from ember.inductor.codegen.cpp.exponential import EXP_PRELUDE
from ember.inductor.codegen.cpp.half_precision import HALF_PRELUDE, HALF_TYPES, uses_half_precision
from ember.inductor.codegen.cpp.kernel import CppKernel
from ember.inductor.codegen.cpp.ops import CPP_TYPES, PRELUDE
from ember.inductor.codegen.cpp.parallel_regions import serial_twin
from ember.inductor.codegen.cpp.tiling import TRANSPOSE_PRELUDE
from ember.inductor.ir.program import Program
from ember.inductor.scheduler.fusion import Kernel
from ember.runtime import ArtifactCache, load_shared_library


class CppBackend:
    """Generates C++ with OpenMP for CPU tensors; one shared library per graph."""

    # torch's CPU convolutions (oneDNN) run NHWC faster than NCHW, as cuDNN's do: small_cnn,
    # Hugging Face's ResNet and ConvNeXt 1.1-1.6x a step channels-last (docs/perf/cpu-kernels.md)
    # and its kernels vectorize along rows or, for reductions read a row apart, across them
    capabilities = frozenset(
        {"cpu", CHANNELS_LAST_CONVOLUTIONS, CHANNELS_LAST_DEPTHWISE, ONE_REDUCTION_DIRECTION}
    )
    dtypes = frozenset(CPP_TYPES)
    atomic_dtypes = dtypes - HALF_TYPES  # no `omp atomic` on 16-bit storages' bits
    kernel_prefix = "cpp"

    def generate(self, kernel: Kernel, program: Program) -> KernelSource:
        return serial_twin(CppKernel(kernel, program).generate())

    def module(self, kernels: Sequence[KernelSource]) -> str:
        prelude = [PRELUDE.strip()]
        if any(uses_half_precision(k.source) for k in kernels):
            prelude.append(HALF_PRELUDE.strip())
        if any("ember_exp(" in k.source for k in kernels):
            prelude.append(EXP_PRELUDE.strip())
        if any("ember_transpose_tile(" in k.source for k in kernels):
            prelude.append(TRANSPOSE_PRELUDE.strip())  # <immintrin.h> costs ~0.4 s a build
        return "\n\n".join([*prelude, *(k.source for k in kernels)]) + "\n"

    def load(self, module: str, cache: ArtifactCache) -> dict[str, Callable[..., None]]:
        vector_math = probe_cache.vector_math_flags(cache)  # no g++ run once probed
        key = cache.key(
            module.encode(),
            config={"flags": [*FLAGS, *vector_math]},
            versions={"ember-inductor": _version(), "compiler": compiler_version()},
        )
        library = load_shared_library(
            cache, key, lambda: compile_shared_library(module, vector_math)
        )
        kernels: dict[str, Callable[..., None]] = {}
        for line in module.splitlines():
            if line.startswith('extern "C" void '):
                name, params = line[len('extern "C" void ') :].split("(", 1)
                function = getattr(library, name)
                function.restype = None
                function.argtypes = [
                    ctypes.c_void_p if p.strip().startswith("void*") else ctypes.c_int64
                    for p in params.rstrip(")").split(",")
                    if p.strip()
                ]
                kernels[name] = function
        return kernels

    def pointer(self, tensor: str) -> str:
        return f"{tensor}.data_ptr()"


def _version() -> str:
    try:
        return metadata.version("ember-inductor")
    except metadata.PackageNotFoundError:
        return "0+source"
