"""Corpus: calls — *args/**kwargs, defaults, keyword calls, inlined user functions, methods,
closures, nested functions, lambdas, containers (lists, tuples, dicts, sets, slices)."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch
from capture_corpus_support import Case, cases, check, randn

OFFSET = 2.0
WEIGHTS = {"a": 1.5, "b": -0.5}


def helper(x, scale=2.0):
    return x * scale


def helper_kwonly(x, *, shift):
    return x + shift


def helper_star(*tensors):
    return sum(tensors)


def helper_kwargs(x, **options):
    return x * options.get("scale", 1.0) + options.get("shift", 0.0)


def call_helper(x):
    return helper(x) + helper(x, 3.0) + helper(x, scale=4.0)


def call_kwonly(x):
    return helper_kwonly(x, shift=1.0)


def call_star(x, y):
    return helper_star(x, y, x)


def call_star_unpack(xs):
    return helper_star(*xs)


def call_kwargs_unpack(x):
    opts = {"scale": 2.0, "shift": 1.0}
    return helper_kwargs(x, **opts)


def varargs_fn(*args):
    return args[0] + args[1]


def varkwargs_fn(x, **kwargs):
    return x * kwargs["a"] + kwargs["b"]


def defaults_fn(x, a=1, b=2.0, c=None):
    if c is None:
        return x * a + b
    return x + c


def kwonly_defaults(x, *, mode="add", k=3):
    if mode == "add":
        return x + k
    return x * k


def nested_function(x):
    def inner(y):
        return y * 2

    return inner(x) + 1


def closure_read(x):
    k = x.shape[0]

    def inner(y):
        return y * k

    return inner(x)


def closure_write(x):
    total = x

    def bump():
        nonlocal total
        total = total + 1

    bump()
    bump()
    return total


def make_adder(n):
    def add(x):
        return x + n

    return add


ADD_THREE = make_adder(3)


def outer_closure(x):
    return ADD_THREE(x)


def lambda_call(x):
    f = lambda t: t * 3  # noqa: E731
    return f(x)


def recursion(x, n):
    if n == 0:
        return x
    return recursion(x * 2, n - 1)


def global_read(x):
    return x + OFFSET


def global_dict_read(x):
    return x * WEIGHTS["a"] + WEIGHTS["b"]


def global_function_call(x):
    return helper(helper(x))


class Point(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


def namedtuple_input(p):
    return p.x + p.y


def namedtuple_output(x):
    return Point(x, x * 2)


def list_ops(x):
    xs = [x, x * 2]
    xs.append(x * 3)
    xs.extend([x * 4])
    xs.insert(0, x * 0)
    last = xs.pop()
    return xs[1:], last, len(xs)


def list_setitem(x):
    xs = [x, x, x]
    xs[1] = x * 5
    xs[-1] = x * 7
    return xs


def list_concat_repeat(x):
    return [x] * 2 + [x + 1]


def tuple_ops(x):
    t = (x, x * 2, 3)
    return t[0] + t[1] * t[2], t[-1], t[:2], (1, 2, 3).index(3), (1, 2) + (3,)  # noqa: RUF005 - the program tests tuple concatenation


def dict_ops(x):
    d = {"a": x, "b": x * 2}
    d["c"] = x * 3
    d.update(e=x * 4)
    keys = list(d.keys())
    total = 0
    for _k, v in d.items():
        total = total + v
    return d, keys, total, d.get("z", 0), "a" in d


def dict_input(d):
    return d["x"] * d["scale"]


def dict_values_sum(d):
    return sum(d.values())


def dict_merge(x):
    a = {"p": x}
    b = {"q": x + 1}
    return {**a, **b}


def set_ops(x, n):
    s = {1, 2}
    s.add(n)
    return x * len(s), 3 in s


def slice_objects(x):
    s = slice(1, 3)
    return x[s], x[::-1] if False else x[1:]


def range_object(x):
    r = range(2, 8, 2)
    return x * len(r) + r[1], list(r)


def return_nested(x):
    return {"out": [x, (x + 1, {"deep": x * 2})], "n": 3}


def return_input(x, y):
    return x, y + 1


def return_constant_only(x):
    return 3


def method_on_list_of_tensors(xs):
    return torch.cat(xs).sum()


def kwargs_through(x, y):
    return torch.add(x, y, alpha=2)


def getattr_builtin(x):
    fn = torch.relu
    return fn(x)


def hasattr_builtin(x):
    if hasattr(x, "shape"):
        return x + 1
    return x


def type_builtin(x, n):
    if type(n) is int:
        return x * n
    return x


def str_format(x, n):
    name = f"w{n}"
    return x * len(name)


CASES = cases(
    Case(call_helper, lambda: (randn(3),)),
    Case(call_kwonly, lambda: (randn(3),)),
    Case(call_star, lambda: (randn(3), randn(3))),
    Case(call_star_unpack, lambda: ([randn(3), randn(3)],)),
    Case(call_kwargs_unpack, lambda: (randn(3),)),
    Case(varargs_fn, lambda: (randn(3), randn(3))),
    Case(varkwargs_fn, lambda: (randn(3),), kwargs={"a": 2.0, "b": 1.0}),
    Case(defaults_fn, lambda: (randn(3),)),
    Case(kwonly_defaults, lambda: (randn(3),), kwargs={"mode": "mul"}),
    Case(nested_function, lambda: (randn(3),)),
    Case(closure_read, lambda: (randn(3),)),
    Case(closure_write, lambda: (randn(3),)),
    Case(outer_closure, lambda: (randn(3),)),
    Case(ADD_THREE, lambda: (randn(3),)),
    Case(lambda_call, lambda: (randn(3),)),
    Case(recursion, lambda: (randn(3), 3)),
    Case(global_read, lambda: (randn(3),)),
    Case(global_dict_read, lambda: (randn(3),)),
    Case(global_function_call, lambda: (randn(3),)),
    Case(namedtuple_input, lambda: (Point(randn(2), randn(2)),)),
    Case(namedtuple_output, lambda: (randn(2),)),
    Case(list_ops, lambda: (randn(2),)),
    Case(list_setitem, lambda: (randn(2),)),
    Case(list_concat_repeat, lambda: (randn(2),)),
    Case(tuple_ops, lambda: (randn(2),)),
    Case(dict_ops, lambda: (randn(2),)),
    Case(dict_input, lambda: ({"x": randn(2), "scale": 3.0},)),
    Case(dict_values_sum, lambda: ({"a": randn(2), "b": randn(2)},)),
    Case(dict_merge, lambda: (randn(2),)),
    Case(set_ops, lambda: (randn(2), 5)),
    Case(slice_objects, lambda: (randn(5),)),
    Case(range_object, lambda: (randn(2),)),
    Case(return_nested, lambda: (randn(2),)),
    Case(return_input, lambda: (randn(2), randn(2))),
    Case(return_constant_only, lambda: (randn(2),), graphs=0),
    Case(method_on_list_of_tensors, lambda: ([randn(2), randn(3)],)),
    Case(kwargs_through, lambda: (randn(2), randn(2))),
    Case(getattr_builtin, lambda: (randn(2),)),
    Case(hasattr_builtin, lambda: (randn(2),)),
    Case(type_builtin, lambda: (randn(2), 3)),
    Case(str_format, lambda: (randn(2), 12)),
)


@pytest.mark.parametrize("case", CASES)
def test_program(case: Case) -> None:
    check(case)
