"""scaled_dot_product_attention's mask laid out as the GPU's fused attention kernels take it.

torch picks the attention kernel from the arguments' metadata; on a GPU every fused kernel
(cuDNN, flash, memory-efficient) refuses a mask whose last dimension does not have stride 1,
and the call falls back to the math path, which runs its matmuls in float32 under bf16/fp16
autocast (the CPU kernels accept any mask stride). transformers (5.17) hands exactly such a
mask to every bidirectional attention under a compiler: `q_idx >= 0` broadcast over the keys,
all True, which eager never builds. Capture gives the call the same mask with a contiguous
last dimension instead (one small copy), so the choice can go to the fused kernel eager runs.
A boolean mask costs nothing more: every kernel turns it into a dense additive bias first.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

# torch functions whose `attn_mask` (the fourth positional argument) is laid out for the
# fused kernels before the call.
ATTENTION_FUNCTIONS = (F.scaled_dot_product_attention,)
_MASK_POSITION = 3


def is_attention(fn: object) -> bool:
    """True for the torch attention functions whose mask capture lays out."""
    return any(fn is known for known in ATTENTION_FUNCTIONS)


def fused_kernel_mask(mask: torch.Tensor) -> torch.Tensor:
    """`mask` with stride 1 along its last dimension, the same values and sizes; the
    dimensions it broadcasts (stride 0) before the last two stay broadcast (no copy made)."""
    if mask.dim() == 0 or mask.stride(-1) == 1 or mask.shape[-1] <= 1:
        return mask
    base = mask
    for dim in range(mask.dim() - 2):
        if mask.stride(dim) == 0 and mask.shape[dim] > 1:
            base = base.narrow(dim, 0, 1)
    return base.contiguous().expand(mask.shape)


def attention_arguments(
    args: list[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments of a scaled_dot_product_attention call with its mask, if it has a
    tensor one, laid out by `fused_kernel_mask`."""
    if len(args) > _MASK_POSITION:
        mask = args[_MASK_POSITION]
        if isinstance(mask, torch.Tensor):
            args = [*args[:_MASK_POSITION], fused_kernel_mask(mask), *args[_MASK_POSITION + 1 :]]
        return args, kwargs
    mask = kwargs.get("attn_mask")
    if isinstance(mask, torch.Tensor):
        kwargs = {**kwargs, "attn_mask": fused_kernel_mask(mask)}
    return args, kwargs
