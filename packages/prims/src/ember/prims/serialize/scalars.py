"""JSON forms of Python numbers that plain JSON cannot hold exactly.

Integers beyond ±2**53 become {"$int": "decimal"} (JSON readers in other languages lose
precision past that); inf, -inf and nan become {"$float": "inf"}; finite floats are JSON
numbers written with Python's shortest round-trip repr, so every bit (and -0.0) survives.
"""

from __future__ import annotations

import math
from typing import Any

from ember.prims.errors import GraphFormatError
from ember.prims.serialize.limits import JSON_SAFE_INT, MAX_INT_BITS
from ember.prims.serialize.reader import Field, describe, quote

_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def encode_int(value: int, path: str) -> Any:
    if value.bit_length() >= MAX_INT_BITS:
        raise GraphFormatError(
            f"cannot serialize {path}: integer {value} does not fit in {MAX_INT_BITS} bits"
        )
    if -JSON_SAFE_INT <= value <= JSON_SAFE_INT:
        return value
    return {"$int": str(value)}


def encode_float(value: float) -> Any:
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return {"$float": "nan"}
    return {"$float": "inf" if value > 0 else "-inf"}


def is_float(field: Field) -> bool:
    value = field.value
    return isinstance(value, float) or (
        isinstance(value, dict) and len(value) == 1 and "$float" in value
    )


def decode_float(field: Field) -> float:
    """A JSON number (finite) or {"$float": "inf" | "-inf" | "nan"}."""
    value = field.value
    if isinstance(value, dict) and len(value) == 1 and "$float" in value:
        name = field.child(value["$float"], ".$float").string()
        if name not in _NON_FINITE:
            field.fail(f"unknown float {quote(name)}; expected one of {sorted(_NON_FINITE)}")
        return _NON_FINITE[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        field.fail(f"expected a number, got {describe(value)}")
    if isinstance(value, int):
        field.fail("expected a float (write it with a decimal point, like 1.0)")
    if not math.isfinite(value):
        field.fail('a non-finite float must be written {"$float": "inf" | "-inf" | "nan"}')
    return value
