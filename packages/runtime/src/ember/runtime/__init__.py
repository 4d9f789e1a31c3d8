"""ember-runtime: loads and runs compiled artifacts.

It holds the on-disk compiled-artifact cache (`ArtifactCache`), shared safely between
processes, `load_shared_library` (compiled kernels kept in that cache, opened with ctypes) and
the Triton launcher (`load_triton_module`, `TritonKernel`, `compile_kernels`; triton is
imported only when used); CUDA graph trees come next (see the package README).
"""

from ember.runtime.cache.key import artifact_key
from ember.runtime.cache.store import ArtifactCache, CacheStats, default_cache_root
from ember.runtime.config import RuntimeConfig
from ember.runtime.cudagraphs import CudaGraphTree, FunctionMode, cudagraphify
from ember.runtime.cudagraphs import mark_step_begin as cudagraph_mark_step_begin
from ember.runtime.errors import (
    CacheKeyError,
    CorruptEntryError,
    EmberRuntimeError,
    KernelArgumentError,
    KernelDeviceError,
    KernelSignatureError,
    TritonInterpreterError,
    TritonUnavailableError,
)
from ember.runtime.loader.shared_library import load_shared_library
from ember.runtime.native import NativeBuildError, NativeLaunch
from ember.runtime.native import interpreter as native_interpreter
from ember.runtime.native import interpreter_if_ready as native_interpreter_if_ready
from ember.runtime.triton import (
    LaunchConfig,
    TritonKernel,
    compile_kernels,
    cuda_target,
    load_triton_module,
    triton_cache_dir,
)

__all__ = [
    "ArtifactCache",
    "CacheKeyError",
    "CacheStats",
    "CorruptEntryError",
    "CudaGraphTree",
    "EmberRuntimeError",
    "FunctionMode",
    "KernelArgumentError",
    "KernelDeviceError",
    "KernelSignatureError",
    "LaunchConfig",
    "NativeBuildError",
    "NativeLaunch",
    "RuntimeConfig",
    "TritonInterpreterError",
    "TritonKernel",
    "TritonUnavailableError",
    "artifact_key",
    "compile_kernels",
    "cuda_target",
    "cudagraph_mark_step_begin",
    "cudagraphify",
    "default_cache_root",
    "load_shared_library",
    "load_triton_module",
    "native_interpreter",
    "native_interpreter_if_ready",
    "triton_cache_dir",
]
