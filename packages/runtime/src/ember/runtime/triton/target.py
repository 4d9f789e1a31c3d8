"""`cuda_target`: the Triton compile target of a CUDA device (its compute capability)."""

from __future__ import annotations

from typing import Any


def cuda_target(device_index: int | None = None) -> Any:
    """The `triton.backends.compiler.GPUTarget` of CUDA device `device_index` (default: current)."""
    import torch
    from triton.backends.compiler import GPUTarget

    major, minor = torch.cuda.get_device_capability(device_index)
    return GPUTarget("cuda", major * 10 + minor, 32)


def target_fields(target: Any) -> tuple[str, int | str, int]:
    """A GPUTarget as plain data (backend, arch, warp size)."""
    return (str(target.backend), target.arch, int(target.warp_size))
