"""The C++ spelling of every loop-body op and reduction, keyed by IR op name.

Each entry takes the C++ expressions of its operands (already cast to the op's compute
dtype) and the result's C++ type. Helpers with torch's semantics (NaN-propagating max,
Python-style remainder, the Philox random number generator) live in the module prelude
`PRELUDE`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ember.inductor.codegen.cpp.exponential import exp
from ember.inductor.codegen.cpp.half_precision import HALF_TYPES

# The C++ type each dtype computes in: bfloat16 and float16 values are `float` in registers
# (their storages are 16-bit: half_precision.py).
CPP_TYPES: dict[torch.dtype, str] = {
    torch.float32: "float",
    torch.bfloat16: "float",
    torch.float16: "float",
    torch.float64: "double",
    torch.int64: "int64_t",
    torch.int32: "int32_t",
    torch.int16: "int16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.bool: "bool",
}

PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <limits>
#include <algorithm>
#include <omp.h>

// NaN-propagating max/min as selects, no branches: GCC 12 if-converted the early returns into
// mask conversions it could not vectorize in some loops (channels-last pooling windows ran
// scalar, 224 against 31 us); a + b is the NaN when one is (a's when both are).
template <typename T> static inline T ember_max(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    return __builtin_isunordered(a, b) ? a + b : (a > b ? a : b);
  } else {
    return a > b ? a : b;
  }
}
template <typename T> static inline T ember_min(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    return __builtin_isunordered(a, b) ? a + b : (a < b ? a : b);
  } else {
    return a < b ? a : b;
  }
}
template <typename T> static inline T ember_remainder(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    T r = std::fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    T r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
}
// floor division of integer sizes (a Graph's `floor((s0 - 1)/2)`): C++'s `/` truncates
static inline int64_t ember_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> static inline T ember_fmod(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) return std::fmod(a, b); else return a % b;
}
template <typename T> static inline T ember_sign(T a) {
  if constexpr (std::is_floating_point<T>::value) { if (a != a) return a; }
  return static_cast<T>((a > T(0)) - (a < T(0)));
}
template <typename T> static inline T ember_pow(T a, T b) {
  if constexpr (std::is_integral<T>::value) {
    T result = 1;
    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    while (b) { if (b & 1) result *= a; a *= a; b >>= 1; }
    return result;
  } else return std::pow(a, b);
}
template <typename T> static inline T ember_div(T a, T b) { return a / b; }

// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// counter = (offset, 0), key = seed; a pure function, so any kernel redraws the same number.
static inline void ember_philox(uint64_t seed, uint64_t offset, uint32_t out[4]) {
  uint32_t c0 = static_cast<uint32_t>(offset), c1 = static_cast<uint32_t>(offset >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
// the top 24 bits as a float in [0, 1): every value exact, 1 never reached
static inline float ember_bits_to_unit(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}
static inline float ember_random_uniform(int64_t seed, int64_t offset) {
  uint32_t words[4];
  ember_philox(static_cast<uint64_t>(seed), static_cast<uint64_t>(offset), words);
  return ember_bits_to_unit(words[0]);
}
// Box-Muller on two words: u1 in (0, 1] keeps the logarithm finite
static inline float ember_random_normal(int64_t seed, int64_t offset) {
  uint32_t words[4];
  ember_philox(static_cast<uint64_t>(seed), static_cast<uint64_t>(offset), words);
  float u1 = 1.0f - ember_bits_to_unit(words[0]);
  float u2 = ember_bits_to_unit(words[1]);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864769f * u2);
}
"""

Emit = Callable[[list[str], str], str]


def _call(fn: str) -> Emit:
    return lambda a, t: f"{fn}({', '.join(a)})"


def _infix(op: str) -> Emit:
    return lambda a, t: f"({a[0]} {op} {a[1]})"


def _pow(a: list[str], t: str) -> str:
    """Float powers as ATen's CPU kernel computes them: exponents 2, 3 and -2 as products,
    0.5 and -0.5 as square roots, -1 as a reciprocal, others through `std::pow` (which
    glibc's vector math library vectorizes; the generic `ember_pow` call kept GELU's tanh
    approximation, `x ** 3`, a scalar loop)."""
    if t not in {"float", "double"}:
        return f"ember_pow<{t}>({a[0]}, {a[1]})"
    base = a[0]
    special = {
        2.0: f"({base} * {base})",
        3.0: f"({base} * {base} * {base})",
        -2.0: f"({t}(1) / ({base} * {base}))",
        0.5: f"std::sqrt({base})",
        -0.5: f"({t}(1) / std::sqrt({base}))",
        -1.0: f"({t}(1) / {base})",
    }
    for exponent, spelling in special.items():
        if a[1] == f"static_cast<{t}>({exponent!r})":
            return spelling
    return f"std::pow({base}, {a[1]})"


OPS: dict[str, Emit] = {
    "abs": lambda a, t: f"std::abs({a[0]})" if t != "bool" else a[0],
    "neg": lambda a, t: f"(-{a[0]})",
    "sign": lambda a, t: f"ember_sign<{t}>({a[0]})",
    "signbit": _call("std::signbit"),
    "exp": exp,
    "exp2": _call("std::exp2"),
    "expm1": _call("std::expm1"),
    "log": _call("std::log"),
    "log2": _call("std::log2"),
    "log10": _call("std::log10"),
    "log1p": _call("std::log1p"),
    "sqrt": _call("std::sqrt"),
    "rsqrt": lambda a, t: f"({t}(1) / std::sqrt({a[0]}))",
    "reciprocal": lambda a, t: f"({t}(1) / {a[0]})",
    "sin": _call("std::sin"),
    "cos": _call("std::cos"),
    "tan": _call("std::tan"),
    "asin": _call("std::asin"),
    "acos": _call("std::acos"),
    "atan": _call("std::atan"),
    "sinh": _call("std::sinh"),
    "cosh": _call("std::cosh"),
    "tanh": _call("std::tanh"),
    "asinh": _call("std::asinh"),
    "acosh": _call("std::acosh"),
    "atanh": _call("std::atanh"),
    "erf": _call("std::erf"),
    "erfc": _call("std::erfc"),
    "lgamma": _call("std::lgamma"),
    "ceil": _call("std::ceil"),
    "floor": _call("std::floor"),
    "round": _call("std::nearbyint"),
    "trunc": _call("std::trunc"),
    "isnan": lambda a, t: f"({a[0]} != {a[0]})",
    "isinf": lambda a, t: f"std::isinf(static_cast<double>({a[0]}))",
    "isfinite": lambda a, t: f"std::isfinite(static_cast<double>({a[0]}))",
    "bitwise_not": lambda a, t: f"(!{a[0]})" if t == "bool" else f"static_cast<{t}>(~{a[0]})",
    "logical_not": lambda a, t: f"(!{a[0]})",
    "add": lambda a, t: f"({a[0]} || {a[1]})" if t == "bool" else f"({a[0]} + {a[1]})",
    "sub": _infix("-"),
    "mul": lambda a, t: f"({a[0]} && {a[1]})" if t == "bool" else f"({a[0]} * {a[1]})",
    "div": _infix("/"),
    "remainder": lambda a, t: f"ember_remainder<{t}>({a[0]}, {a[1]})",
    "fmod": lambda a, t: f"ember_fmod<{t}>({a[0]}, {a[1]})",
    "pow": _pow,
    "atan2": _call("std::atan2"),
    "hypot": _call("std::hypot"),
    "copysign": _call("std::copysign"),
    "nextafter": _call("std::nextafter"),
    "maximum": lambda a, t: f"ember_max<{t}>({a[0]}, {a[1]})",
    "minimum": lambda a, t: f"ember_min<{t}>({a[0]}, {a[1]})",
    "bitwise_and": lambda a, t: f"static_cast<{t}>({a[0]} & {a[1]})",
    "bitwise_or": lambda a, t: f"static_cast<{t}>({a[0]} | {a[1]})",
    "bitwise_xor": lambda a, t: f"static_cast<{t}>({a[0]} ^ {a[1]})",
    "shift_left": lambda a, t: f"static_cast<{t}>({a[0]} << {a[1]})",
    "shift_right": lambda a, t: f"static_cast<{t}>({a[0]} >> {a[1]})",
    "eq": _infix("=="),
    "ne": _infix("!="),
    "lt": _infix("<"),
    "le": _infix("<="),
    "gt": _infix(">"),
    "ge": _infix(">="),
    "logical_and": _infix("&&"),
    "logical_or": _infix("||"),
}

# The C++ function drawing each kind of the `random` op, called as fn(seed, offset).
RANDOM: dict[str, str] = {
    "uniform": "ember_random_uniform",
    "normal": "ember_random_normal",
}

# Ops whose operands keep their own dtype (the result dtype differs).
OPERAND_DTYPE_OPS = frozenset(
    {"eq", "ne", "lt", "le", "gt", "ge", "signbit", "isnan", "isinf", "isfinite"}
)


def literal(value: object, dtype: torch.dtype) -> str:
    """A C++ literal of `dtype`."""
    cpp = CPP_TYPES[dtype]
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        number = float(value)  # type: ignore[arg-type]
        if math.isnan(number):
            return f"std::numeric_limits<{cpp}>::quiet_NaN()"
        if math.isinf(number):
            sign = "-" if number < 0 else ""
            return f"{sign}std::numeric_limits<{cpp}>::infinity()"
        return f"static_cast<{cpp}>({number!r})"
    return f"static_cast<{cpp}>({int(value)}L)"  # type: ignore[call-overload]


def accumulator_dtype(reduction_type: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype a reduction of `dtype` values accumulates in. A float32 sum accumulates in
    double: a float accumulator adding one value at a time loses ~n ulps over n values
    (GhostNet's batch-norm means over 2x112x112 values came out 10x less accurate than
    eager's cascade sum, and a ReLU mask read by the backward flipped), a double one rounds
    once at the end. A bfloat16 or float16 sum accumulates as a float32 one."""
    if reduction_type == "sum" and (dtype == torch.float32 or dtype in HALF_TYPES):
        return torch.float64
    return dtype


def reduction_init(reduction_type: str, dtype: torch.dtype) -> str:
    cpp = CPP_TYPES[dtype]
    if reduction_type == "sum":
        return literal(0, dtype)
    if reduction_type == "prod":
        return literal(1, dtype)
    if reduction_type in {"max", "argmax"}:
        if dtype.is_floating_point:
            return f"-std::numeric_limits<{cpp}>::infinity()"
        return f"std::numeric_limits<{cpp}>::lowest()"
    if dtype.is_floating_point:
        return f"std::numeric_limits<{cpp}>::infinity()"
    return f"std::numeric_limits<{cpp}>::max()"


def reduction_combine(reduction_type: str, accumulator: str, value: str, dtype: torch.dtype) -> str:
    cpp = CPP_TYPES[dtype]
    if reduction_type == "sum":
        return f"{accumulator} = {accumulator} + {value};"
    if reduction_type == "prod":
        return f"{accumulator} = {accumulator} * {value};"
    if reduction_type == "max":
        return f"{accumulator} = ember_max<{cpp}>({accumulator}, {value});"
    return f"{accumulator} = ember_min<{cpp}>({accumulator}, {value});"
