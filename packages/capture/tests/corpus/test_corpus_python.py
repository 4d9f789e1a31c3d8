"""Corpus: Python coverage. try/except/finally around code that does not raise, generators
and generator expressions, dict views, sets, functools.partial, itertools, dataclasses
(frozen too) and NamedTuples as inputs, locals and outputs, f-strings and string methods,
super(), properties and class/static methods on modules, assert on Python values."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import typing

import pytest
import torch
from capture_corpus_support import Case, cases, check, randn
from torch import nn


def try_except(x):
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    return y


def try_except_else(x):
    try:
        y = x * 2
    except (KeyError, IndexError):
        y = x
    else:
        y = y + 1
    return y


def try_finally(x):
    try:
        y = x + 1
    finally:
        z = 2
    return y * z


def try_nested(x):
    try:
        try:
            y = x.sin()
        finally:
            y = y + 1
    except RuntimeError:
        y = x
    return y


def try_in_loop(x):
    for i in range(3):
        try:
            x = x + i
        except Exception:
            x = x - i
    return x


def generator_sum(x):
    def gen():
        for i in range(3):
            yield x * i

    return sum(gen())


def generator_list(x):
    def squares(n):
        for i in range(n):
            yield x**i

    return list(squares(3))


def generator_for_loop(x):
    def pairs():
        yield x, 1
        yield x + 1, 2

    out = x * 0
    for t, k in pairs():
        out = out + t * k
    return out


def genexpr_sum(x):
    return sum(x * i for i in range(4))


def genexpr_tuple(x):
    return tuple(x + i for i in range(3) if i != 1)


def genexpr_any(x, n):
    return x * 2 if any(i > 2 for i in range(n)) else x


def dict_keys_loop(x):
    d = {"a": 1, "b": 2}
    for k in d:
        x = x + d[k]
    return x, list(d.keys())


def dict_values_items(x):
    d = {"a": x, "b": x * 2}
    total = sum(d.values())
    names = [k for k, _ in d.items()]
    return total, names, len(d.items())


def dict_key_membership(x):
    d = {"scale": 3}
    if "scale" in d:
        x = x * d["scale"]
    return x


def dict_views_returned(x):
    d = {"a": x, "b": x + 1}
    keys = d.keys()
    d["c"] = x * 2  # a view sees later insertions
    return keys, d.values(), d.items(), len(keys)


def dict_keys_set_operations(x):
    d = {"a": 1, "b": 2, "c": 3}
    common = d.keys() & {"a", "c", "z"}
    return x * len(common), sorted(d.keys() - {"b"}), "b" in d, 3 in d.values()


def set_build_and_ops(x):
    s = {1, 2, 3}
    t = s | {4}
    u = t & {2, 4, 6}
    return x * len(u), sorted(t - s)


def set_membership_and_methods(x):
    s = set()
    s.add(2)
    s.update([3, 4])
    s.discard(3)
    return (x + 1 if 2 in s else x), s.issubset({2, 4, 5}), s


def set_comprehension(x):
    s = {i % 3 for i in range(7)}
    return x * len(s), s


def partial_torch(x):
    add_twice = functools.partial(torch.add, alpha=2)
    return add_twice(x, x)


def _scale(t, factor, offset=0.0):
    return t * factor + offset


def partial_user_function(x):
    f = functools.partial(_scale, factor=3)
    g = functools.partial(f, offset=1.0)
    return g(x)


SCALE_BY_TWO = functools.partial(_scale, factor=2)


def partial_global(x):
    return SCALE_BY_TWO(x)


def itertools_chain(x):
    return [t * 2 for t in itertools.chain([x], (x + 1, x + 2))]


def itertools_chain_from_iterable(x):
    return list(itertools.chain.from_iterable([[x], [x * 2]]))


def itertools_product(x):
    return [x * (i + j) for i, j in itertools.product(range(2), range(3))]


def itertools_zip_longest(x):
    return [a if b is None else a + b for a, b in itertools.zip_longest([x, x * 2], [x])]


@dataclasses.dataclass
class Config:
    scale: float
    bias: torch.Tensor
    name: str = "cfg"


@dataclasses.dataclass(frozen=True)
class Frozen:
    weight: torch.Tensor
    power: int = 2


def dataclass_input(cfg, x):
    return x * cfg.scale + cfg.bias


def dataclass_local_output(x):
    c = Config(2.0, x + 1)
    return Config(c.scale * 2, c.bias * c.scale, name=c.name + "!")


def frozen_input(f, x):
    return x * f.weight**f.power


def frozen_local_output(x):
    f = Frozen(x * 2)
    return Frozen(f.weight + 1, f.power + 1)


def dataclass_field_write(x):
    c = Config(1.0, x)
    c.scale = 3.0
    return c.bias * c.scale


class Pair(typing.NamedTuple):
    left: torch.Tensor
    right: torch.Tensor


def namedtuple_input(p):
    return p.left + p.right, p[0] * 2


def namedtuple_output(x):
    return Pair(x, x * 2)


def namedtuple_unpack(p):
    left, right = p
    return Pair(right, left)


def fstring_constants(x):
    n = x.shape[0]
    label = f"n={n:03d}/{x.dtype}!r={'abc'!r}"
    return x * len(label), label


def string_methods(x):
    name = "Hello World"
    parts = name.lower().split(" ")
    joined = "-".join(parts).replace("o", "0")
    return x * len(joined), joined, name.startswith("He"), f"{1}+{2}"


def string_concat_and_index(x, tag):
    text = tag + "_" + str(x.ndim)
    return x * text.count("_"), text[::-1], text.upper()


class Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x) + 1

    def describe(self):
        return "base"


class Child(Base):
    def forward(self, x):
        return super().forward(x) * 2

    def describe(self):
        return super().describe() + "/child"


class Props(nn.Module):
    factor = 3

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    @property
    def doubled(self):
        return self.factor * 2

    @classmethod
    def offset(cls):
        return cls.factor + 1

    @staticmethod
    def squash(t):
        return torch.tanh(t)

    def forward(self, x):
        return self.squash(self.linear(x)) * self.doubled + self.offset()


def module_super(model, x):
    return model(x), model.describe()


def module_properties(model, x):
    return model(x)


class Plain:
    def __init__(self, k: int) -> None:
        self.k = k

    def apply(self, t):
        return t * self.k


class PlainChild(Plain):
    def apply(self, t):
        return super().apply(t) + 1


def plain_super(obj, x):
    return obj.apply(x)


def assert_python_value(x, n):
    assert n > 0, "n must be positive"
    assert isinstance(n, int)
    return x * n


def assert_shape(x):
    assert x.shape[-1] == 4, f"expected 4 features, got {x.shape[-1]}"
    return x.sum(-1)


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exception):
        self.events.append("exit")
        return False


def user_context_manager(x, recorder):
    with recorder as r:
        y = x * 2
        r.events.append("body")
    return y + len(recorder.events)


class Registry(dict):
    def get(self, key, default=None):
        return super().get(key.lower(), default)

    def lookup(self, key):
        return self.get(key, 0), super().__contains__(key), super().get("missing", 1)


def super_of_dict_subclass(x, registry):
    found, present, fallback = registry.lookup("Scale")
    return x * found + fallback, present


def _model(cls: type) -> nn.Module:
    torch.manual_seed(0)
    return cls()


CASES = cases(
    Case(try_except, lambda: (randn(4),)),
    Case(try_except_else, lambda: (randn(4),)),
    Case(try_finally, lambda: (randn(4),)),
    Case(try_nested, lambda: (randn(4),)),
    Case(try_in_loop, lambda: (randn(4),)),
    Case(generator_sum, lambda: (randn(4),)),
    Case(generator_list, lambda: (randn(4),)),
    Case(generator_for_loop, lambda: (randn(4),)),
    Case(genexpr_sum, lambda: (randn(4),)),
    Case(genexpr_tuple, lambda: (randn(4),)),
    Case(genexpr_any, lambda: (randn(4), 5)),
    Case(dict_keys_loop, lambda: (randn(4),)),
    Case(dict_values_items, lambda: (randn(4),)),
    Case(dict_key_membership, lambda: (randn(4),)),
    Case(dict_views_returned, lambda: (randn(4),)),
    Case(dict_keys_set_operations, lambda: (randn(4),)),
    Case(set_build_and_ops, lambda: (randn(4),)),
    Case(set_membership_and_methods, lambda: (randn(4),)),
    Case(set_comprehension, lambda: (randn(4),)),
    Case(partial_torch, lambda: (randn(4),)),
    Case(partial_user_function, lambda: (randn(4),)),
    Case(partial_global, lambda: (randn(4),)),
    Case(itertools_chain, lambda: (randn(4),)),
    Case(itertools_chain_from_iterable, lambda: (randn(4),), graphs=1),
    Case(itertools_product, lambda: (randn(4),)),
    Case(itertools_zip_longest, lambda: (randn(4),)),
    Case(dataclass_input, lambda: (Config(1.5, randn(4)), randn(4))),
    Case(dataclass_local_output, lambda: (randn(4),)),
    Case(frozen_input, lambda: (Frozen(randn(4)), randn(4))),
    Case(frozen_local_output, lambda: (randn(4),)),
    Case(dataclass_field_write, lambda: (randn(4),)),
    Case(namedtuple_input, lambda: (Pair(randn(4), randn(4)),)),
    Case(namedtuple_output, lambda: (randn(4),)),
    Case(namedtuple_unpack, lambda: (Pair(randn(4), randn(4)),), graphs=0),
    Case(fstring_constants, lambda: (randn(4),)),
    Case(string_methods, lambda: (randn(4),)),
    Case(string_concat_and_index, lambda: (randn(4), "tag")),
    Case(module_super, lambda: (_model(Child), randn(2, 4)), copy_inputs=False),
    Case(module_properties, lambda: (_model(Props), randn(2, 4)), copy_inputs=False),
    Case(plain_super, lambda: (PlainChild(3), randn(4))),
    Case(assert_python_value, lambda: (randn(4), 3)),
    Case(assert_shape, lambda: (randn(2, 4),)),
    Case(user_context_manager, lambda: (randn(4), Recorder())),
    Case(super_of_dict_subclass, lambda: (randn(4), Registry(scale=3))),
)


@pytest.mark.parametrize("case", CASES)
def test_python(case: Case) -> None:
    check(case)
