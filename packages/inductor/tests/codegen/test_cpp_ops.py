"""The C++ generator implements every op of the loop-level IR."""

from __future__ import annotations

from ember.inductor.codegen.cpp.ops import OPS
from ember.inductor.ir.ops import BINARY_OPS, UNARY_OPS


def test_every_math_op_has_a_cpp_spelling() -> None:
    assert set(UNARY_OPS) | set(BINARY_OPS) == set(OPS)
