"""The Triton launcher: loads generated kernel modules, compiles their kernels (in parallel,
cached on disk) and launches them with little Python per call.

`load_triton_module` imports a module's source from the ember cache, `TritonKernel` compiles
and launches one kernel, `compile_kernels` warms many at once, `cuda_target` names a device's
compile target. triton is optional: it is imported only when a kernel is compiled or run.
"""

from ember.runtime.triton.autotune import AutotuneKey, Autotuner, cuda_bench
from ember.runtime.triton.compile_pool import compile_kernels
from ember.runtime.triton.config import LaunchConfig
from ember.runtime.triton.kernel import TritonKernel
from ember.runtime.triton.module import load_triton_module, triton_cache_dir
from ember.runtime.triton.target import cuda_target

__all__ = [
    "AutotuneKey",
    "Autotuner",
    "LaunchConfig",
    "TritonKernel",
    "compile_kernels",
    "cuda_bench",
    "cuda_target",
    "load_triton_module",
    "triton_cache_dir",
]
