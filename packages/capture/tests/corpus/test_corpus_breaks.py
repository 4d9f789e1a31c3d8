"""Corpus: graph breaks. Each program meets something capture cannot model (print, .item(),
a branch on a tensor, an opaque or disabled call, an import...) in straight-line code, in
loops, inside inlined calls and modules, inside `with` and `try` blocks; the graph before
it is compiled, the rest continues in compiled resume functions. Outputs must match eager."""

from __future__ import annotations

import dataclasses
import operator
import sys
import typing

import pytest
import torch
from capture_corpus_support import Case, cases, check, randn
from torch import nn

from ember.capture.compile import disable


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    print("woo")
    if b.sum() < 0:
        b = b * -1
    return x * b


def print_between(x):
    y = x + 1
    print("between")
    return y * 2


def print_first(x):
    print("first")
    return x.sin()


def print_last(x):
    y = x.cos()
    print(y.shape)
    return y


def print_tensor(x):
    print(x + 1)
    return x * 2


def two_prints(x):
    y = x + 1
    print("one")
    y = y * 2
    print("two")
    return y - 1


def print_keyword_arguments(x):
    y = x + 1
    print("shape", y.shape, sep="=")
    return y * 2


def print_star_arguments(x):
    parts = ("a", "b")
    y = x * 3
    print(*parts)
    return y


def item_scale(x):
    s = x.sum().item()
    return x * s


def tolist_loop(x):
    return [v * 2 for v in x.tolist()]


def branch_on_sum(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def branch_on_sum_else(x):
    y = x * 2
    if y.sum() > 1000:
        out = y + 1
    else:
        out = y - 1
    return out * 3


def branch_in_loop(x):
    for i in range(3):
        if x.max() > i:
            x = x * 2
    return x


def while_on_tensor(x):
    while x.sum() < 10:
        x = x * 2
    return x


def print_in_loop(x):
    for i in range(3):
        x = x + i
        print(i)
    return x


def _helper_prints(y):
    print("inner")
    return y * 2


def break_in_callee(x):
    a = x + 1
    b = _helper_prints(a)
    return b + 1


def _positive(y):
    if y.sum() > 0:
        return y
    return -y


def branch_in_callee(x):
    return _positive(x.abs() + 1) * 2


def _triple_after_print(y):
    print("make")
    return y * 3


def break_with_call_below(x):
    return torch.cat([x, _triple_after_print(x)])


@disable
def _disabled(y):
    return y + 1


def disabled_callee(x):
    return _disabled(x * 2) * 3


def assert_on_tensor(x):
    y = x.abs()
    assert (y >= 0).all(), "absolute values are non-negative"
    return y + 1


def import_inside(x):
    y = x + 1
    import colorsys

    return y * colorsys.ONE_THIRD


_RUNS = [0]


def _forget_colorsys() -> None:
    """Unimport colorsys before the eager and the first compiled run (not the second, whose
    resume function is guarded on the module object the first one imported)."""
    _RUNS[0] += 1
    if _RUNS[0] % 3 != 0:
        sys.modules.pop("colorsys", None)


def opaque_object_call(x):
    shape = operator.attrgetter("shape")(x)
    return x.reshape(shape[0], 1) * 2


def keeps_list(x):
    xs = [x, x + 1]
    print(len(xs))
    return xs[1] * 2


def keeps_dict(x):
    d = {"a": x * 2, "b": 3}
    print(sorted(d))
    return d["a"] * d["b"]


def keeps_constants(x):
    n = 3
    s = "abc"
    t = (x + 1, n)
    print(s)
    return t[0] * t[1] + len(s)


def keeps_shared_list(x):
    xs = [x]
    ys = xs
    print("alias")
    ys.append(x + 1)
    return len(xs), xs[-1]


def loop_over_tensors(x, y):
    acc = x * 0
    for t in [x, y, x + y]:
        acc = acc + t
        print("step")
    return acc


def enumerate_loop(x):
    out = x
    for i, scale in enumerate([1.0, 2.0]):
        out = out * scale + i
        print(i)
    return out


def zip_loop(x, y):
    out = []
    for a, b in zip([x, y], [y, x]):
        print("pair")
        out.append(a - b)
    return out


def reads_grad(x):
    g = x.grad
    if g is None:
        return x + 1
    return x + g


def format_tensor(x):
    s = f"{x.sum():.2f}"
    return x * 2, s


def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
        print("inside")
        z = y + 1
    return z, x * 3


def enable_grad_block(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
            print("inside")
            z = y * y
        w = z + 1
    return w, z


def set_grad_enabled_block(x):
    with torch.set_grad_enabled(False):
        y = x + 1
        print("off")
        y = y * 2
    return y, x * 2


def autocast_block(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        print("autocast")
        z = y @ w
    return z.float()


def try_block(x):
    try:
        y = x + 1
        print("try")
        z = y * 2
    except ValueError:
        z = x
    return z


def try_finally_block(x):
    try:
        y = x + 1
        print("try")
    finally:
        y = y * 2
    return y


def try_catches_what_the_break_raises(x):
    y = x + 1
    try:
        scale = int("not a number")
    except ValueError:
        scale = 3
    return y * scale


def try_in_loop_with_break(x):
    for i in range(3):
        try:
            x = x + i
            print(i)
        except KeyError:
            x = x - 1
    return x


def data_dependent_while_item(x):
    steps = 0
    while x.abs().max().item() > 1:
        x = x / 2
        steps += 1
    return x, steps


def _counter_callee(y, k):
    print("k", k)
    return y * k


def keyword_callee(x):
    return _counter_callee(x + 1, k=3) - 1


@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor


def keeps_dataclass(x):
    p = Pair(x + 1, x - 1)
    print("pair")
    return p.first * p.second


class Point(typing.NamedTuple):
    x: torch.Tensor
    y: int


def keeps_namedtuple(x):
    p = Point(x * 2, 3)
    print("point")
    return p.x * p.y, p


def print_in_branch_on_python(x, flag):
    if flag:
        print("flag")
        x = x + 1
    else:
        x = x - 1
    return x * 2


def comprehension_with_break(x):
    return [print(i) or x * i for i in range(2)]


class NoGradHelper(nn.Module):
    @torch.no_grad()
    def forward(self, x):
        print("inside a no_grad-decorated method")
        return x * 2


NO_GRAD_HELPER = NoGradHelper()


def no_grad_decorated_callee_with_break(x):
    return NO_GRAD_HELPER(x) + x


def dict_comprehension_with_break(x):
    return {i: print(i) or x * i for i in range(2)}


def set_comprehension_with_break(x):
    return x * len({print(i) or i % 2 for i in range(3)})


def generator_with_break(x):
    def gen():
        for i in range(2):
            print(i)
            yield x * i

    return sum(gen())


def lambda_across_break(x):
    scale = 3
    f = lambda t: t * scale  # noqa: E731
    print("lambda")
    return f(x)


def nested_break_depth(x):
    return _outer_helper(x) + 1


def _outer_helper(y):
    return _helper_prints(y * 2) - 1


def many_breaks(x):
    for i in range(4):
        x = x + 1
        if x.sum() > 100 * i:
            print("big")
    return x


def item_in_condition(x):
    if x.sum().item() > 0:
        return x * 2
    return x


def unpack_after_break(x):
    a, b = x.chunk(2)
    print("chunks")
    c, d = b, a
    return c - d


class Recorder:
    """A context manager written in Python: `with` over it breaks, the body is captured."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exception):
        self.events.append("exit")
        return False


def user_context_manager(x, recorder):
    y = x + 1
    with recorder as r:
        z = y * 2
        print("body")
        r.events.append("body")
    return z - 1


def nullcontext_block(x):
    import contextlib

    y = x * 2
    with contextlib.nullcontext():
        y = y + 1
    return y


class PrintingBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        h = self.linear(x)
        print("block")
        return h.relu()


class WithPrintingChild(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = PrintingBlock()
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.block(x * 2))


class Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x)
        if h.mean() > 0:
            return self.b(h)
        return h


class SequentialWithPrint(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 4), PrintingBlock(), nn.ReLU())

    def forward(self, x):
        return self.seq(x) + 1


def module_with_break(model, x):
    return model(x)


def _model(cls: type) -> object:
    torch.manual_seed(0)
    return cls()


def _negative(*shape: int) -> torch.Tensor:
    return -torch.rand(*shape) - 0.1


CASES = cases(
    Case(toy_example, lambda: (randn(4), _negative(4)), graphs=3, breaks=2),
    Case(toy_example, lambda: (randn(4), torch.rand(4) + 0.1), graphs=3, breaks=2),
    Case(print_between, lambda: (randn(4),), graphs=2, breaks=1),
    Case(print_first, lambda: (randn(4),), graphs=1, breaks=1),
    Case(print_last, lambda: (randn(4),), graphs=1, breaks=1),
    Case(print_tensor, lambda: (randn(4),), graphs=2, breaks=1),
    Case(two_prints, lambda: (randn(4),), graphs=3, breaks=2),
    Case(print_keyword_arguments, lambda: (randn(4),), graphs=2, breaks=1),
    Case(print_star_arguments, lambda: (randn(4),), graphs=1, breaks=1),
    Case(item_scale, lambda: (randn(4),), graphs=2, breaks=1),
    Case(tolist_loop, lambda: (randn(4),), graphs=0, breaks=1),
    Case(branch_on_sum, lambda: (torch.rand(4),), graphs=2, breaks=1),
    Case(branch_on_sum_else, lambda: (torch.rand(4),), graphs=2, breaks=1),
    Case(branch_in_loop, lambda: (torch.full((4,), 1.5),), graphs=4, breaks=3),
    Case(while_on_tensor, lambda: (torch.ones(4),), graphs=3, breaks=3),
    Case(print_in_loop, lambda: (randn(4),), graphs=3, breaks=3),
    Case(break_in_callee, lambda: (randn(4),), graphs=3, breaks=2),
    Case(branch_in_callee, lambda: (randn(4),), graphs=3, breaks=2),
    Case(break_with_call_below, lambda: (randn(4),), graphs=2, breaks=2),
    Case(disabled_callee, lambda: (randn(4),), graphs=2, breaks=1),
    Case(assert_on_tensor, lambda: (randn(4),), graphs=2, breaks=1),
    Case(import_inside, lambda: (randn(4),), graphs=2, breaks=1, reset=_forget_colorsys),
    Case(opaque_object_call, lambda: (randn(4),), graphs=1, breaks=2),
    Case(keeps_list, lambda: (randn(4),), graphs=2, breaks=1),
    Case(keeps_dict, lambda: (randn(4),), graphs=2, breaks=1),
    Case(keeps_constants, lambda: (randn(4),), graphs=2, breaks=1),
    Case(keeps_shared_list, lambda: (randn(4),), graphs=1, breaks=1),
    Case(loop_over_tensors, lambda: (randn(4), randn(4)), graphs=3, breaks=3),
    Case(enumerate_loop, lambda: (randn(4),), graphs=2, breaks=2),
    Case(zip_loop, lambda: (randn(4), randn(4)), graphs=2, breaks=2),
    Case(reads_grad, lambda: (randn(4),), graphs=1, breaks=1),
    Case(format_tensor, lambda: (randn(4),), graphs=2, breaks=1),
    Case(no_grad_block, lambda: (randn(4).requires_grad_(),), graphs=2, breaks=1),
    Case(enable_grad_block, lambda: (randn(4).requires_grad_(),), graphs=2, breaks=1),
    # The decorator's `with ctx_factory():` is a grad-mode block; grad mode comes back on.
    Case(
        no_grad_decorated_callee_with_break,
        lambda: (randn(4).requires_grad_(),),
        graphs=4,
        breaks=3,
        state=torch.is_grad_enabled,
        copy_inputs=False,
    ),
    Case(set_grad_enabled_block, lambda: (randn(4).requires_grad_(),), graphs=2, breaks=1),
    Case(autocast_block, lambda: (randn(2, 4), randn(4, 4)), graphs=2, breaks=1),
    Case(try_block, lambda: (randn(4),), graphs=2, breaks=1),
    Case(try_finally_block, lambda: (randn(4),), graphs=2, breaks=1),
    Case(try_catches_what_the_break_raises, lambda: (randn(4),), graphs=1, breaks=1),
    Case(try_in_loop_with_break, lambda: (randn(4),), graphs=3, breaks=3),
    Case(data_dependent_while_item, lambda: (randn(4) * 8,), graphs=6, breaks=6),
    Case(keyword_callee, lambda: (randn(4),), graphs=3, breaks=2),
    Case(keeps_dataclass, lambda: (randn(4),), graphs=2, breaks=1),
    Case(keeps_namedtuple, lambda: (randn(4),), graphs=2, breaks=1),
    Case(print_in_branch_on_python, lambda: (randn(4), True), graphs=1, breaks=1),
    # On 3.12 the comprehension runs inline: each iteration's print breaks the resumed frame.
    Case(comprehension_with_break, lambda: (randn(4),), graphs=0, breaks=1, py312=(2, 2)),
    Case(dict_comprehension_with_break, lambda: (randn(4),), graphs=0, breaks=1, py312=(2, 2)),
    Case(set_comprehension_with_break, lambda: (randn(4),), graphs=1, breaks=1, py312=(1, 3)),
    Case(generator_with_break, lambda: (randn(4),), graphs=0, breaks=2),
    Case(lambda_across_break, lambda: (randn(4),), graphs=1, breaks=1),
    Case(nested_break_depth, lambda: (randn(4),), graphs=4, breaks=3),
    Case(many_breaks, lambda: (torch.full((4,), 10.0),), graphs=4, breaks=5),
    Case(item_in_condition, lambda: (torch.rand(4),), graphs=2, breaks=1),
    Case(unpack_after_break, lambda: (randn(4),), graphs=2, breaks=1),
    Case(user_context_manager, lambda: (randn(4), Recorder()), graphs=2, breaks=1),
    Case(nullcontext_block, lambda: (randn(4),)),  # a new object: inlined
    Case(
        module_with_break,
        lambda: (_model(WithPrintingChild), randn(2, 4)),
        graphs=4,
        breaks=3,
        copy_inputs=False,
    ),
    Case(
        module_with_break,
        lambda: (_model(Gated), randn(2, 4)),
        graphs=2,
        breaks=2,
        copy_inputs=False,
    ),
    Case(
        module_with_break,
        lambda: (_model(SequentialWithPrint), randn(2, 4)),
        graphs=5,
        breaks=4,
        copy_inputs=False,
    ),
)


@pytest.mark.parametrize("case", CASES)
def test_break(case: Case) -> None:
    check(case)
