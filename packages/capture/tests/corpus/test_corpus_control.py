"""Corpus: control flow over Python values (if/for/while, unrolled), iteration builtins and
comprehensions."""

from __future__ import annotations

import pytest
import torch
from capture_corpus_support import Case, cases, check, randn


def if_else(x, n):
    if n > 0:
        y = x + 1
    elif n < 0:
        y = x - 1
    else:
        y = x
    return y


def for_range(x):
    for i in range(3):
        x = x + i
    return x


def for_range_step(x):
    total = x
    for i in range(10, 0, -3):
        total = total * 0.5 + i
    return total


def while_loop(x):
    i = 0
    while i < 4:
        x = x * 2
        i += 1
    return x


def while_break(x):
    i = 0
    while True:
        i += 1
        x = x + 1
        if i >= 3:
            break
    return x


def for_continue(x):
    for i in range(5):
        if i % 2 == 0:
            continue
        x = x + i
    return x


def for_else(x):
    for i in range(3):
        if i == 10:
            break
    else:
        x = x + 100
    return x


def nested_loops(x):
    for i in range(2):
        for j in range(3):
            x = x + i * j
    return x


def enumerate_list(xs):
    out = 0
    for i, t in enumerate(xs):
        out = out + t * i
    return out


def enumerate_start(xs):
    return [t * i for i, t in enumerate(xs, start=1)]


def zip_lists(xs, ys):
    return [a + b for a, b in zip(xs, ys)]


def reversed_list(xs):
    out = []
    for t in reversed(xs):
        out.append(t * 2)
    return out


def len_of_list(xs):
    return xs[0] * len(xs)


def list_comprehension(x):
    return [x * i for i in range(4)]


def comprehension_filter(x):
    return [x + i for i in range(6) if i % 2]


def nested_comprehension(x):
    return [[x * i + j for j in range(2)] for i in range(2)]


def dict_comprehension(x):
    return {f"k{i}": x * i for i in range(3)}


def set_comprehension(x, n):
    s = {i % 3 for i in range(n)}
    return x * len(s)


def generator_sum(xs):
    return sum(t * 2 for t in xs)


def loop_over_tensor_rows(x):
    out = []
    for row in x:
        out.append(row.sum())
    return torch.stack(out)


def loop_over_shape(x):
    total = 1
    for size in x.shape:
        total *= size
    return x.reshape(total)


def isinstance_checks(x, y):
    if isinstance(x, torch.Tensor) and isinstance(y, (int, float)):
        return x * y
    return x


def isinstance_list(xs):
    if isinstance(xs, list):
        return xs[0] + xs[1]
    return xs[0]


def min_max_python(x, a, b):
    return x * min(a, b) + max([a, b, 3])


def map_filter(xs):
    doubled = list(map(lambda t: t * 2, xs))
    return doubled


def any_all(x, flags):
    if any(flags) and not all(flags):
        return x + 1
    return x


def sorted_keys(x, d):
    out = x
    for key in sorted(d):
        out = out * d[key]
    return out


def iter_next(xs):
    it = iter(xs)
    first = next(it)
    second = next(it)
    return first - second


def star_unpack(xs):
    first, *rest = xs
    return first + sum(rest)


def unpack_tuple(pair):
    a, b = pair
    return a * b


def try_no_raise(x):
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    return y


def try_finally(x):
    try:
        y = x * 2
    finally:
        z = 1
    return y + z


def assert_python(x, n):
    assert n > 0, "n must be positive"
    return x * n


CASES = cases(
    Case(if_else, lambda: (randn(3), -2)),
    Case(for_range, lambda: (randn(3),)),
    Case(for_range_step, lambda: (randn(3),)),
    Case(while_loop, lambda: (randn(3),)),
    Case(while_break, lambda: (randn(3),)),
    Case(for_continue, lambda: (randn(3),)),
    Case(for_else, lambda: (randn(3),)),
    Case(nested_loops, lambda: (randn(3),)),
    Case(enumerate_list, lambda: ([randn(2), randn(2), randn(2)],)),
    Case(enumerate_start, lambda: ([randn(2), randn(2)],)),
    Case(zip_lists, lambda: ([randn(2), randn(2)], [randn(2), randn(2)])),
    Case(reversed_list, lambda: ([randn(2), randn(3)],)),
    Case(len_of_list, lambda: ([randn(2), randn(2), randn(2)],)),
    Case(list_comprehension, lambda: (randn(2),)),
    Case(comprehension_filter, lambda: (randn(2),)),
    Case(nested_comprehension, lambda: (randn(2),)),
    Case(dict_comprehension, lambda: (randn(2),)),
    Case(set_comprehension, lambda: (randn(2), 7)),
    Case(generator_sum, lambda: ([randn(2), randn(2)],)),
    Case(loop_over_tensor_rows, lambda: (randn(3, 4),)),
    Case(loop_over_shape, lambda: (randn(2, 3, 4),)),
    Case(isinstance_checks, lambda: (randn(2), 3)),
    Case(isinstance_list, lambda: ([randn(2), randn(2)],)),
    Case(min_max_python, lambda: (randn(2), 4, 9)),
    Case(map_filter, lambda: ([randn(2), randn(2)],)),
    Case(any_all, lambda: (randn(2), [True, False])),
    Case(sorted_keys, lambda: (randn(2), {"b": 2.0, "a": 3.0})),
    Case(iter_next, lambda: ([randn(2), randn(2)],)),
    Case(star_unpack, lambda: ([randn(2), randn(2), randn(2)],)),
    Case(unpack_tuple, lambda: ((randn(2), randn(2)),)),
    Case(try_no_raise, lambda: (randn(2),)),
    Case(try_finally, lambda: (randn(2),)),
    Case(assert_python, lambda: (randn(2), 3)),
)


@pytest.mark.parametrize("case", CASES)
def test_program(case: Case) -> None:
    check(case)
