"""Precompiled CUDA kernels launched through the CUDA driver with ctypes: no Triton, no C
compiler (`CubinKernel`, used by ahead-of-time packages)."""

from ember.runtime.cubin.kernel import CubinKernel, CubinVariant

__all__ = ["CubinKernel", "CubinVariant"]
