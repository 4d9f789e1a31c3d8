"""The Triton spelling of every loop-body op and reduction, keyed by IR op name.

Each entry takes the Triton expressions of its operands and the compute dtype's Triton name.
Half and bfloat16 values are computed in float32 (loads upcast, stores and explicit casts
round). Functions Triton has natively (`tl.exp`, `tl.maximum`) are used directly; the rest
come from `libdevice`, which the generated module binds to CUDA's libdevice, or to a
stand-in (`device_math.py`) under `TRITON_INTERPRET=1`. Helpers with torch's semantics
(NaN-propagating max, Python remainder and floor division, argmax with first-index ties) are
`@triton.jit` functions in `PRELUDE`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

# The Triton type of each dtype as stored in memory.
TRITON_TYPES: dict[torch.dtype, str] = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.int16: "tl.int16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}

# The signature type of a pointer to each dtype (what `triton.compile` is told).
POINTER_TYPES: dict[torch.dtype, str] = {
    torch.float32: "*fp32",
    torch.float64: "*fp64",
    torch.float16: "*fp16",
    torch.bfloat16: "*bf16",
    torch.int64: "*i64",
    torch.int32: "*i32",
    torch.int16: "*i16",
    torch.int8: "*i8",
    torch.uint8: "*u8",
    torch.bool: "*i1",
}

# Storage dtypes whose values are computed in float32.
HALF_TYPES = frozenset({torch.float16, torch.bfloat16})


def compute_type(dtype: torch.dtype) -> str:
    """The Triton type a value of `dtype` is computed in."""
    return "tl.float32" if dtype in HALF_TYPES else TRITON_TYPES[dtype]


PRELUDE = """
import os

import triton
import triton.language as tl

# compile workers import this module: on the GPU path it imports nothing but triton
if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    from ember.inductor.codegen.triton.device_math import InterpreterLibdevice

    libdevice = InterpreterLibdevice()
else:
    from triton.language.extra import libdevice


@triton.jit
def ember_maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def ember_minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def ember_multiply(a, b):
    return a * b


@triton.jit
def ember_welford_combine(pivot_a, mean_a, m2_a, weight_a, pivot_b, mean_b, m2_b, weight_b):
    # Chan's merge of two (pivot, mean - pivot, squared deviations, count) summaries, the
    # means kept as offsets from an element of the data (small: no float32 rounding at the
    # data's offset from zero); an empty summary adds nothing
    weight = weight_a + weight_b
    share = tl.where(weight == 0.0, 0.0, weight_b / tl.where(weight == 0.0, 1.0, weight))
    delta = (pivot_b - pivot_a) + (mean_b - mean_a)
    mean = mean_a + delta * share
    m2 = m2_a + m2_b + delta * delta * weight_a * share
    empty = weight_a == 0.0
    return (
        tl.where(empty, pivot_b, pivot_a),
        tl.where(empty, mean_b, mean),
        tl.where(empty, m2_b, m2),
        weight,
    )


if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):

    @triton.jit
    def ember_welford_m2(pivot, mean, m2, count):
        # the interpreter folds tl.reduce's lanes one after another (1023 float32 merges into
        # one sum: 2.9e-6 of a variance, 100x eager's); neighbours merge pairwise here, as
        # on a GPU, whose reduction is a tree
        while pivot.shape[1] > 1:
            halves = [tl.split(tl.reshape(t, [t.shape[0], t.shape[1] // 2, 2])) for t in
                      (pivot, mean, m2, count)]
            pivot, mean, m2, count = ember_welford_combine(
                *(half[0] for half in halves), *(half[1] for half in halves)
            )
        return tl.reshape(m2, [m2.shape[0]])

else:

    @triton.jit
    def ember_welford_m2(pivot, mean, m2, count):
        _, _, m2, _ = tl.reduce((pivot, mean, m2, count), 1, ember_welford_combine)
        return m2


@triton.jit
def ember_remainder(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def ember_floordiv(a, b):
    q = a // b
    return tl.where(((a % b) != 0) & ((a < 0) != (b < 0)), q - 1, q)


@triton.jit
def ember_fremainder(a, b):
    r = libdevice.fmod(a, b)
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def ember_sign(a):
    return (a > 0).to(a.dtype) - (a < 0).to(a.dtype)


@triton.jit
def ember_fsign(a):
    return tl.where(a != a, a, (a > 0).to(a.dtype) - (a < 0).to(a.dtype))


@triton.jit
def ember_argmax_step(value, index, candidate, candidate_index):
    # keep the first index of the largest value; NaN is the largest
    take = (candidate > value) | ((candidate != candidate) & (value == value))
    take = take | ((candidate == value) & (candidate_index < index))
    take = take | ((candidate != candidate) & (value != value) & (candidate_index < index))
    return tl.where(take, candidate, value), tl.where(take, candidate_index, index)


@triton.jit
def ember_argmin_step(value, index, candidate, candidate_index):
    # keep the first index of the smallest value; NaN wins, as in torch.argmin
    take = (candidate < value) | ((candidate != candidate) & (value == value))
    take = take | ((candidate == value) & (candidate_index < index))
    take = take | ((candidate != candidate) & (value != value) & (candidate_index < index))
    return tl.where(take, candidate, value), tl.where(take, candidate_index, index)
"""

Emit = Callable[[list[str], str], str]


def _lib(fn: str) -> Emit:
    return lambda a, t: f"libdevice.{fn}({', '.join(a)})"


def _tl(fn: str) -> Emit:
    return lambda a, t: f"tl.{fn}({', '.join(a)})"


def _infix(op: str) -> Emit:
    return lambda a, t: f"({a[0]} {op} {a[1]})"


def _float(fast: Emit, integer: Emit | None = None) -> Emit:
    """`fast` on floats; `integer` (default: identity) on integers and bools."""
    return lambda a, t: fast(a, t) if "float" in t else (integer(a, t) if integer else a[0])


def _pow(a: list[str], t: str) -> str:
    if "float" in t:
        return f"libdevice.pow({a[0]}, {a[1]})"
    # integer powers through float64 are exact while the result fits in 53 bits
    return f"libdevice.pow({a[0]}.to(tl.float64), {a[1]}.to(tl.float64)).to({t})"


# Float powers by a constant that eager computes without pow (ATen's pow_tensor_scalar: an
# exponent of 1 copies, 2 and 3 multiply, -1 and -2 divide): the same roundings as eager,
# and no libdevice.pow call (about 30 instructions an element) in norm backwards.
CONSTANT_POWERS: dict[float, Callable[[str], str]] = {
    1.0: lambda b: b,
    2.0: lambda b: f"({b} * {b})",
    3.0: lambda b: f"({b} * {b} * {b})",
    -1.0: lambda b: f"(1.0 / {b})",
    -2.0: lambda b: f"(1.0 / ({b} * {b}))",
}


OPS: dict[str, Emit] = {
    "abs": _float(_tl("abs"), lambda a, t: a[0] if t == "tl.int1" else f"tl.abs({a[0]})"),
    "neg": lambda a, t: f"(-{a[0]})",
    "sign": lambda a, t: f"ember_fsign({a[0]})" if "float" in t else f"ember_sign({a[0]})",
    "signbit": lambda a, t: f"(libdevice.signbit({a[0]}) != 0)",
    "exp": _tl("exp"),
    "exp2": _tl("exp2"),
    "expm1": _lib("expm1"),
    "log": _tl("log"),
    "log2": _tl("log2"),
    "log10": _lib("log10"),
    "log1p": _lib("log1p"),
    "sqrt": _lib("sqrt"),
    "rsqrt": _lib("rsqrt"),
    "reciprocal": lambda a, t: f"(1.0 / {a[0]})",
    "sin": _tl("sin"),
    "cos": _tl("cos"),
    "tan": _lib("tan"),
    "asin": _lib("asin"),
    "acos": _lib("acos"),
    "atan": _lib("atan"),
    "sinh": _lib("sinh"),
    "cosh": _lib("cosh"),
    "tanh": _lib("tanh"),
    "asinh": _lib("asinh"),
    "acosh": _lib("acosh"),
    "atanh": _lib("atanh"),
    "erf": _lib("erf"),
    "erfc": _lib("erfc"),
    "lgamma": _lib("lgamma"),
    "ceil": _float(_lib("ceil")),
    "floor": _float(_lib("floor")),
    "round": _float(_lib("nearbyint")),
    "trunc": _float(_lib("trunc")),
    "isnan": lambda a, t: f"({a[0]} != {a[0]})",
    "isinf": lambda a, t: f"(tl.abs({a[0]}) == float('inf'))",
    "isfinite": lambda a, t: f"(tl.abs({a[0]}) < float('inf'))",
    "bitwise_not": lambda a, t: f"({a[0]} == 0)" if t == "tl.int1" else f"(~{a[0]})",
    "logical_not": lambda a, t: f"({a[0]} == 0)",
    "add": lambda a, t: f"({a[0]} | {a[1]})" if t == "tl.int1" else f"({a[0]} + {a[1]})",
    "sub": _infix("-"),
    "mul": lambda a, t: f"({a[0]} & {a[1]})" if t == "tl.int1" else f"({a[0]} * {a[1]})",
    # the IR's integer division truncates (C semantics), as Triton's `//` does on integers
    "div": lambda a, t: f"({a[0]} / {a[1]})" if "float" in t else f"({a[0]} // {a[1]})",
    "remainder": lambda a, t: (
        f"ember_fremainder({a[0]}, {a[1]})" if "float" in t else f"ember_remainder({a[0]}, {a[1]})"
    ),
    "fmod": lambda a, t: (
        f"libdevice.fmod({a[0]}, {a[1]})" if "float" in t else f"({a[0]} % {a[1]})"
    ),
    "pow": _pow,
    "atan2": _lib("atan2"),
    "hypot": _lib("hypot"),
    "copysign": _lib("copysign"),
    "nextafter": _lib("nextafter"),
    "maximum": lambda a, t: (
        f"ember_maximum({a[0]}, {a[1]})" if "float" in t else f"tl.maximum({a[0]}, {a[1]})"
    ),
    "minimum": lambda a, t: (
        f"ember_minimum({a[0]}, {a[1]})" if "float" in t else f"tl.minimum({a[0]}, {a[1]})"
    ),
    "bitwise_and": _infix("&"),
    "bitwise_or": _infix("|"),
    "bitwise_xor": _infix("^"),
    "shift_left": _infix("<<"),
    "shift_right": _infix(">>"),
    "eq": _infix("=="),
    "ne": _infix("!="),
    "lt": _infix("<"),
    "le": _infix("<="),
    "gt": _infix(">"),
    "ge": _infix(">="),
    "logical_and": lambda a, t: f"(({a[0]} != 0) & ({a[1]} != 0))",
    "logical_or": lambda a, t: f"(({a[0]} != 0) | ({a[1]} != 0))",
}

# Ops whose operands keep their own dtype (the result dtype differs).
OPERAND_DTYPE_OPS = frozenset(
    {"eq", "ne", "lt", "le", "gt", "ge", "signbit", "isnan", "isinf", "isfinite"}
)


def literal(value: object, dtype: torch.dtype) -> str:
    """A Triton scalar tensor of `dtype` (a one-element block that broadcasts)."""
    kind = compute_type(dtype)
    if dtype == torch.bool:
        return f"tl.full([1], {1 if value else 0}, tl.int1)"
    if dtype.is_floating_point:
        number = float(value)  # type: ignore[arg-type]
        text = f"float('{number}')" if math.isnan(number) or math.isinf(number) else repr(number)
        return f"tl.full([1], {text}, {kind})"
    return f"tl.full([1], {int(value)}, {kind})"  # type: ignore[call-overload]


def reduction_identity(reduction_type: str, dtype: torch.dtype) -> str:
    """The value masked-out lanes hold, as a Python literal of the compute type."""
    floating = dtype.is_floating_point
    if reduction_type in {"sum", "welford_m2"}:
        return "0.0" if floating else "0"
    if reduction_type == "prod":
        return "1.0" if floating else "1"
    if reduction_type in {"max", "argmax"}:
        return "float('-inf')" if floating else str(_integer_bounds(dtype)[0])
    return "float('inf')" if floating else str(_integer_bounds(dtype)[1])


def _integer_bounds(dtype: torch.dtype) -> tuple[int, int]:
    if dtype == torch.bool:
        return 0, 1
    info = torch.iinfo(dtype)
    return info.min, info.max


def reduction_combine(reduction_type: str, accumulator: str, value: str, dtype: torch.dtype) -> str:
    """The elementwise step of a looped reduction."""
    if reduction_type == "sum":
        return f"{accumulator} + {value}"
    if reduction_type == "prod":
        return f"{accumulator} * {value}"
    maximum = reduction_type == "max"
    if dtype.is_floating_point:
        return f"ember_{'maximum' if maximum else 'minimum'}({accumulator}, {value})"
    return f"tl.{'maximum' if maximum else 'minimum'}({accumulator}, {value})"


def reduction_final(reduction_type: str, value: str, dtype: torch.dtype) -> str:
    """Reduce a [XBLOCK, RBLOCK] block along its second axis (keeping it as [XBLOCK, 1]); a
    persistent welford_m2's block holds squared deviations already."""
    if reduction_type in {"sum", "welford_m2"}:
        return f"tl.sum({value}, 1)[:, None]"
    if reduction_type == "prod":
        return f"tl.reduce({value}, 1, ember_multiply)[:, None]"
    maximum = reduction_type == "max"
    if dtype.is_floating_point:
        return f"tl.reduce({value}, 1, ember_{'maximum' if maximum else 'minimum'})[:, None]"
    return f"tl.{'max' if maximum else 'min'}({value}, 1)[:, None]"
