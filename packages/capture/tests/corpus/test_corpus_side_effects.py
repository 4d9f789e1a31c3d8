"""Corpus: side effects. Programs write attributes and globals and mutate lists and dicts
that came from outside; capture replays the writes in order after the graph runs (also
across graph breaks), so the inputs and the global state afterwards match eager."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from capture_corpus_support import Case, cases, check, randn
from torch import nn

STATE: dict[str, Any] = {"value": None}
LAST = None
SEEN: list[Any] = []


def _reset() -> None:
    global LAST
    LAST = None
    STATE["value"] = None
    SEEN.clear()


def _state() -> tuple[Any, ...]:
    return LAST, dict(STATE), list(SEEN)


class Box:
    def __init__(self) -> None:
        self.value = torch.zeros(2)
        self.tag = "new"


class Holder:
    def __init__(self) -> None:
        self.box = Box()


def global_write(x):
    global LAST
    LAST = x.sum()
    return x + 1


def global_write_constant(x):
    global LAST
    LAST = "seen"
    return x * 2


def global_write_then_read(x):
    global LAST
    LAST = x * 2
    return LAST + 1


def global_dict_mutation(x):
    STATE["value"] = x.mean()
    return x - 1


def global_list_append(x):
    SEEN.append(x * 3)
    return len(SEEN)


def global_write_across_break(x):
    global LAST
    LAST = x + 1
    print("global")
    STATE["value"] = LAST * 2
    return x


def write_returned_dict(box, x):
    # The dict is planned first for the write and then for the return value, but the return
    # value is rebuilt first: it must still be built once, where first used.
    collected = {"sum": x + 1}
    box.value = collected
    return collected


def write_kept_dict_across_break(box, x):
    collected = {"sum": x + 1}
    box.value = collected
    print("break")
    box.value = None
    return collected["sum"] * 2


def attribute_write(box, x):
    box.value = x * 2
    return x + 1


def attribute_write_constant(box, x):
    box.tag = "used"
    return x


def attribute_write_order(box, x):
    box.value = x
    box.value = x * 3
    return box.value + 1


def nested_attribute_write(holder, x):
    holder.box.value = x - 1
    return holder.box.value * 2


def attribute_write_across_break(box, x):
    box.value = x + 1
    print("box")
    box.tag = "after"
    return box.value * 2


def list_append_input(xs, x):
    xs.append(x * 2)
    return len(xs)


def list_setitem_input(xs, x):
    xs[0] = x + 1
    return xs[0] * 2


def list_pop_extend_insert(xs, x):
    last = xs.pop()
    xs.extend([x, x * 2])
    xs.insert(0, last + 1)
    return last


def list_mutation_across_break(xs, x):
    xs.append(x)
    print("list")
    xs.append(x + 1)
    return len(xs)


def dict_set_input(d, x):
    d["new"] = x * 2
    return d["a"] + 1


def dict_update_pop(d, x):
    d.update(b=x, c=x * 3)
    removed = d.pop("a")
    return removed * 2


def dict_delete(d, x):
    del d["a"]
    return x + 1


def aliased_lists(xs, ys, x):
    xs.append(x)
    return len(ys)


def tensor_inplace_input(x, y):
    x.add_(1)
    y.mul_(2)
    return x + y


class Running(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.linear = nn.Linear(4, 4)
        self.last_shape = None


def buffer_assign(model, x):
    model.mean = model.mean * 0.9 + x.mean(0) * 0.1
    return model.linear(x)


def buffer_inplace(model, x):
    model.count.add_(1)
    model.mean.copy_(x.mean(0))
    return model.linear(x) + model.mean


def module_attribute_write(model, x):
    model.last_shape = tuple(x.shape)
    return model.linear(x)


def buffer_update_across_break(model, x):
    model.mean = x.mean(0)
    print("buffer")
    return model.linear(x) * model.mean


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.steps += 1
        return x[:, :1] * self.steps


def module_self_update(model, x):
    return model(x)


def _shared_module(make: type[nn.Module]) -> tuple[Any, Any, Any]:
    """A module shared by every run of a case (its identity is guarded), with a reset that
    restores its state and a reading of that state, which the harness compares."""
    torch.manual_seed(0)
    model = make()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    attributes = {k: v for k, v in vars(model).items() if not k.startswith("_")}

    def reset() -> None:
        model.load_state_dict(initial)
        vars(model).update(attributes)

    def state() -> Any:
        plain = {k: v for k, v in vars(model).items() if not k.startswith("_")}
        return {k: v.clone() for k, v in model.state_dict().items()}, plain

    return model, reset, state


def _module_case(fn: Any, make: type[nn.Module], **kwargs: Any) -> Case:
    model, reset, state = _shared_module(make)
    return Case(
        fn,
        lambda: (model, randn(3, 4)),
        copy_inputs=False,
        reset=reset,
        state=state,
        **kwargs,
    )


CASES = cases(
    Case(global_write, lambda: (randn(4),), state=_state, reset=_reset),
    Case(global_write_constant, lambda: (randn(4),), state=_state, reset=_reset),
    Case(global_write_then_read, lambda: (randn(4),), state=_state, reset=_reset),
    Case(global_dict_mutation, lambda: (randn(4),), state=_state, reset=_reset),
    Case(global_list_append, lambda: (randn(4),), state=_state, reset=_reset),
    Case(
        global_write_across_break,
        lambda: (randn(4),),
        graphs=2,
        breaks=1,
        state=_state,
        reset=_reset,
    ),
    Case(attribute_write, lambda: (Box(), randn(2))),
    Case(write_returned_dict, lambda: (Box(), randn(2))),
    Case(write_kept_dict_across_break, lambda: (Box(), randn(2)), graphs=2, breaks=1),
    Case(attribute_write_constant, lambda: (Box(), randn(2)), graphs=0),
    Case(attribute_write_order, lambda: (Box(), randn(2))),
    Case(nested_attribute_write, lambda: (Holder(), randn(2))),
    Case(attribute_write_across_break, lambda: (Box(), randn(2)), graphs=2, breaks=1),
    Case(list_append_input, lambda: ([randn(2)], randn(2))),
    Case(list_setitem_input, lambda: ([randn(2), randn(2)], randn(2))),
    Case(list_pop_extend_insert, lambda: ([randn(2), randn(2)], randn(2))),
    Case(list_mutation_across_break, lambda: ([randn(2)], randn(2)), graphs=1, breaks=1),
    Case(dict_set_input, lambda: ({"a": randn(2)}, randn(2))),
    Case(dict_update_pop, lambda: ({"a": randn(2)}, randn(2))),
    Case(dict_delete, lambda: ({"a": randn(2), "b": 1}, randn(2))),
    Case(tensor_inplace_input, lambda: (randn(2), randn(2))),
    _module_case(buffer_assign, Running),
    _module_case(buffer_inplace, Running),
    _module_case(module_attribute_write, Running),
    _module_case(buffer_update_across_break, Running, graphs=2, breaks=1),
    _module_case(module_self_update, Counter),
)


@pytest.mark.parametrize("case", CASES)
def test_side_effect(case: Case) -> None:
    check(case)


def test_aliased_lists_see_each_other() -> None:
    from ember.capture.compile import compile as ember_compile
    from ember.capture.testing import CompileCounter

    xs: list[Any] = [randn(2)]
    compiled = ember_compile(aliased_lists, backend=CompileCounter())
    assert compiled(xs, xs, randn(2)) == 2
    assert len(xs) == 2
