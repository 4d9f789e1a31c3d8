"""The Triton code generator: one `@triton.jit` kernel per fused kernel, for CUDA tensors."""

from ember.inductor.codegen.triton.backend import TritonBackend

__all__ = ["TritonBackend"]
