"""The loop-level IR's operators: every op a loop body may hold, by name and kind.

A code generator implements each op here (the C++ generator's table is checked against this
one by a test); lowerings build bodies only from these. Reductions are not body ops: a
reduction is a property of the node whose body it reduces (`REDUCTION_TYPES`).
"""

from __future__ import annotations

# Memory and leaves: load(storage, index, indirect), constant(value), index_expr(expr).
LEAF_OPS = ("load", "constant", "index_expr")

# Counter-based random numbers: random(seed, offset, kind) is a pure function of an int64
# seed value (a BodyValue) and an int64 offset (an index expression, the element's flat
# position plus the sampling op's offset); kind is one of RANDOM_KINDS, the result float32.
RANDOM_OPS = ("random",)
RANDOM_KINDS = ("uniform", "normal")  # uniform on [0, 1); standard normal

# Structure: to_dtype(x, dtype), where(c, a, b), masked(mask, body, other).
STRUCTURE_OPS = ("to_dtype", "where", "masked")

UNARY_OPS = (
    "abs", "neg", "sign", "signbit", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
    "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
    "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma", "ceil", "floor",
    "round", "trunc", "isnan", "isinf", "isfinite", "bitwise_not", "logical_not",
)  # fmt: skip

BINARY_OPS = (
    "add", "sub", "mul", "div", "remainder", "fmod", "pow", "atan2", "hypot", "copysign",
    "nextafter", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor",
    "shift_left", "shift_right", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
    "logical_or",
)  # fmt: skip

COMPARISON_OPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"})
BOOLEAN_UNARY_OPS = frozenset({"signbit", "isnan", "isinf", "isfinite", "logical_not"})

# How a reduction node combines its body's values along its reduction loops. "welford_m2" is
# the sum of the values' squared deviations from their mean, in one pass (Welford's updates,
# merged by Chan's formula): what a variance divides; only code generators that state
# `welford_reductions` get it (lowering/reductions.py: var).
REDUCTION_TYPES = ("sum", "prod", "max", "min", "argmax", "argmin", "welford_m2")

# How a loop node stores its value: None overwrites `storage[index] = value`; "atomic_add"
# accumulates `storage[index] += value` atomically (several loop points may hit one index).
STORE_MODES = ("atomic_add",)

ALL_OPS = (*LEAF_OPS, *RANDOM_OPS, *STRUCTURE_OPS, *UNARY_OPS, *BINARY_OPS)
