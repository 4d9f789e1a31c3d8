"""Extern kernels: matrix multiply, convolution and attention run torch's own kernels on
realized tensors (vendor libraries beat generated loops there). These ATen ops are kept
whole by the decomposition pass (`EXTERN_OPS`).
"""

from __future__ import annotations

from typing import Any

from ember.inductor.lowering.graph_lowering import LoweringContext
from ember.inductor.lowering.table import lowers

EXTERN_OPS = (
    "aten::mm.default",
    "aten::mm.dtype",  # a 16-bit product written in float32 (`passes/float32_matmuls.py`)
    "aten::addmm.default",
    "aten::bmm.default",
    "aten::baddbmm.default",
    "aten::convolution.default",
    "aten::_convolution.default",
    "aten::convolution_backward.default",
    "aten::_scaled_dot_product_flash_attention_for_cpu.default",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward.default",
    "aten::_scaled_dot_product_flash_attention.default",
    "aten::_scaled_dot_product_flash_attention_backward.default",
    "aten::_scaled_dot_product_efficient_attention.default",
    "aten::_scaled_dot_product_efficient_attention_backward.default",
    "aten::_scaled_dot_product_cudnn_attention.default",
    "aten::_scaled_dot_product_cudnn_attention_backward.default",
    "prims::matmul",
    "prims::convolution",
)


# Arguments whose strides the op checks, by name: each reaches it in the strides the Graph
# declares (eager's), copied there if need be (`LoweringContext.extern`). Memory-efficient
# attention refuses a bias whose strides but the last are not multiples of 8 elements;
# eager's attention pads the bias to make them so (`lowering/argument_layouts.py`).
EXACT_STRIDES: dict[str, tuple[str, ...]] = {
    "aten::_scaled_dot_product_flash_attention_for_cpu.default": ("attn_mask",),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward.default": ("attn_mask",),
    "aten::_scaled_dot_product_efficient_attention.default": ("attn_bias",),
    "aten::_scaled_dot_product_efficient_attention_backward.default": ("attn_bias",),
    "aten::_scaled_dot_product_cudnn_attention.default": ("attn_bias",),
    "aten::_scaled_dot_product_cudnn_attention_backward.default": ("attn_bias",),
}


def _extern(target: str) -> None:
    exact = EXACT_STRIDES.get(target, ())

    @lowers(target)
    def lower(ctx: LoweringContext, *args: Any, **kwargs: Any) -> list[Any]:
        return ctx.extern(target, args, kwargs, is_fallback=False, exact=exact)


# Convolutions lower in `pointwise_convolutions.py`: a 1x1 one may run as matrix multiplies.
LOWERED_ELSEWHERE = ("aten::convolution.default", "aten::convolution_backward.default")

for _target in EXTERN_OPS:
    if _target not in LOWERED_ELSEWHERE:
        _extern(_target)
