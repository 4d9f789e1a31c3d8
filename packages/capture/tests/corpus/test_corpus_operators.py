"""Corpus: arithmetic, comparisons, unary operators and constants, on tensors and Python values."""

from __future__ import annotations

import math

import pytest
import torch
from capture_corpus_support import Case, cases, check, randn

SCALE = 3.0


def add_tensors(x, y):
    return x + y


def arith_mix(x, y):
    return (x - y) * 2 / (y.abs() + 1) ** 2


def floordiv_mod(x):
    return x // 2, x % 3


def matmul_op(a, b):
    return a @ b


def python_arith(x, n):
    k = n * 3 + 1 - n // 2
    return x * k + (n % 4) + 2**n


def float_math(x):
    return x * math.sqrt(16.0) + math.pi


def negate_invert(x, m):
    return -x, ~m, +x


def compare_tensors(x, y):
    return x > y, x <= y, x == y, x != y


def compare_python(x, n):
    if n > 2 and n <= 5 and n != 4:
        return x + 1
    return x - 1


def chained_compare(x, n):
    if 0 < n < 10:
        return x * n
    return x


def not_operator(x, flag):
    if not flag:
        return x * 2
    return x


def is_none(x, y):
    if y is None:
        return x + 1
    return x + y


def is_not_none(x, y):
    if y is not None:
        return x + y
    return x


def inplace_python(x, n):
    n += 2
    n *= 3
    return x + n


def inplace_tensor_op(x):
    y = x.clone()
    y += 1
    y *= 2
    return y


def bool_ops(x, a, b):
    if a and b:
        return x + 1
    if a or b:
        return x + 2
    return x


def ternary(x, flag):
    return x * 2 if flag else x * 3


def string_constants(x, name):
    if name.startswith("re") and name.upper() == "RELU":
        return torch.relu(x)
    return x


def fstring_constant(x, n):
    key = f"layer_{n}"
    return x + len(key)


def global_constant(x):
    return x * SCALE


def tensor_scalar_reverse(x):
    return 1 - x, 2 / (x.abs() + 1), 3 * x


def bitwise_bools(x, y):
    return (x > 0) & (y > 0), (x > 0) | (y > 0), (x > 0) ^ (y > 0)


def pow_ops(x):
    return x**2, 2**x, pow(x, 3)


def abs_round(x, f):
    return abs(x), round(f, 1), abs(-3)


def divmod_min_max(x, a, b):
    q, r = divmod(a, b)
    return x * q + r + min(a, b) + max(a, b, 7)


CASES = cases(
    Case(add_tensors, lambda: (randn(4), randn(4))),
    Case(arith_mix, lambda: (randn(3, 4), randn(3, 4))),
    Case(floordiv_mod, lambda: (randn(5) * 10,)),
    Case(matmul_op, lambda: (randn(3, 4), randn(4, 5))),
    Case(python_arith, lambda: (randn(3), 5)),
    Case(float_math, lambda: (randn(3),)),
    Case(negate_invert, lambda: (randn(3), torch.tensor([True, False]))),
    Case(compare_tensors, lambda: (randn(4), randn(4))),
    Case(compare_python, lambda: (randn(2), 3)),
    Case(chained_compare, lambda: (randn(2), 4)),
    Case(not_operator, lambda: (randn(2), False)),
    Case(is_none, lambda: (randn(2), None)),
    Case(is_not_none, lambda: (randn(2), randn(2))),
    Case(inplace_python, lambda: (randn(2), 1)),
    Case(inplace_tensor_op, lambda: (randn(3),)),
    Case(bool_ops, lambda: (randn(2), True, False)),
    Case(ternary, lambda: (randn(2), True)),
    Case(string_constants, lambda: (randn(3), "relu")),
    Case(fstring_constant, lambda: (randn(3), 7)),
    Case(global_constant, lambda: (randn(3),)),
    Case(tensor_scalar_reverse, lambda: (randn(3),)),
    Case(bitwise_bools, lambda: (randn(4), randn(4))),
    Case(pow_ops, lambda: (randn(3),)),
    Case(abs_round, lambda: (randn(3), 2.345)),
    Case(divmod_min_max, lambda: (randn(2), 7, 3)),
)


@pytest.mark.parametrize("case", CASES)
def test_program(case: Case) -> None:
    check(case)
