"""bfloat16 and float16 in C++ kernels: 16-bit storages, float registers.

A 16-bit storage is a `uint16_t*` to the kernel; a load widens the bits to `float`, the body
computes in `float`, a store narrows with round-to-nearest-even exactly as eager's scalar
conversions do (`c10::BFloat16`, `c10::Half`), and an explicit cast rounds and widens again.
The conversions are inline integer and float arithmetic so that GCC vectorizes the loops
(GCC 12 vectorizes no loop converting `_Float16`, and has no `__bf16` conversions).
"""

from __future__ import annotations

import torch

HALF_TYPES = frozenset({torch.bfloat16, torch.float16})

# The element type of a 16-bit storage's pointer: the raw bits.
STORAGE_TYPE = "uint16_t"

_SUFFIX = {torch.bfloat16: "bf16", torch.float16: "fp16"}

HALF_PRELUDE = r"""
// bfloat16: the top half of a float32; narrowing adds the round-to-nearest-even bias
// (c10::BFloat16's round_to_nearest_even, NaN -> 0x7FC0)
static inline float ember_bf16_to_float(uint16_t bits) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(bits) << 16);
}
static inline uint16_t ember_float_to_bf16(float value) {
  uint32_t bits = __builtin_bit_cast(uint32_t, value);
  uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return value != value ? static_cast<uint16_t>(0x7FC0u) : static_cast<uint16_t>(rounded);
}
static inline float ember_round_bf16(float value) {
  return ember_bf16_to_float(ember_float_to_bf16(value));
}
// float16: the FP16 library's branch-free conversions, which c10::Half uses (NaN -> sign | 0x7E00)
static inline float ember_fp16_to_float(uint16_t half) {
  uint32_t w = static_cast<uint32_t>(half) << 16;
  uint32_t sign = w & 0x80000000u;
  uint32_t two_w = w + w;
  float normalized = __builtin_bit_cast(float, (two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  float denormalized = __builtin_bit_cast(float, (two_w >> 17) | (126u << 23)) - 0.5f;
  uint32_t magnitude = two_w < (1u << 27) ? __builtin_bit_cast(uint32_t, denormalized)
                                          : __builtin_bit_cast(uint32_t, normalized);
  return __builtin_bit_cast(float, sign | magnitude);
}
static inline uint16_t ember_float_to_fp16(float value) {
  float base = (std::fabs(value) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t w = __builtin_bit_cast(uint32_t, value);
  uint32_t shl1_w = w + w;
  uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = __builtin_bit_cast(float, (bias >> 1) + 0x07800000u) + base;
  uint32_t bits = __builtin_bit_cast(uint32_t, base);
  uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
static inline float ember_round_fp16(float value) {
  return ember_fp16_to_float(ember_float_to_fp16(value));
}
"""


def widen(dtype: torch.dtype, bits: str) -> str:
    """The float value of a 16-bit element `bits` of `dtype`."""
    return f"ember_{_SUFFIX[dtype]}_to_float({bits})"


def narrow(dtype: torch.dtype, value: str) -> str:
    """The bits of the float `value` rounded to `dtype`, as a store writes them."""
    return f"ember_float_to_{_SUFFIX[dtype]}({value})"


def round_to(dtype: torch.dtype, value: str) -> str:
    """The float `value` rounded to `dtype` and widened again (an explicit cast)."""
    return f"ember_round_{_SUFFIX[dtype]}({value})"


def uses_half_precision(source: str) -> bool:
    """Whether a kernel's source calls a conversion of `HALF_PRELUDE`."""
    return "_bf16" in source or "_fp16" in source
