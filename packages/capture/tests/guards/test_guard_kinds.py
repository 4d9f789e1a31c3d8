"""Each guard kind: no recompilation while its condition holds, exactly one when it changes,
and a failure reason in user terms that names the line where the value was first used."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from ember.capture.compile import compile as ember_compile
from ember.capture.testing import CompileCounter

SCALE = 2.0


def uses_tensor(x):
    return x * 2


def uses_two(x, y):
    return x + y


def uses_int(x, n):
    return x * n


def uses_sequence(xs):
    return xs[0] + xs[1]


def uses_list(xs):
    return sum(xs)


def uses_dict(d):
    return sum(d.values())


def uses_module(model, x):
    return model(x)


def uses_global(x):
    return x * SCALE


def uses_grad_mode(x, w):
    return x * w


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        return self.linear(x)


def run_guard_case(
    fn: Callable[..., Any],
    first: Callable[[], tuple[Any, ...]],
    second: Callable[[], tuple[Any, ...]],
    reason: str,
    context: Callable[[], Any] | None = None,
) -> list[str]:
    # Captures, not backend calls: a recompile to an equal Graph reuses its compiled code.
    compiled = ember_compile(fn, backend=CompileCounter())
    state = compiled._ember_compiled
    compiled(*first())
    compiled(*first())
    assert state.captures == 1, "a call with unchanged inputs recompiled"
    with context() if context else _null():
        compiled(*second())
        compiled(*second())
    assert state.captures == 2, "the guarded change did not cause exactly one recompile"
    reasons = compiled._ember_compiled.recompile_reasons
    assert len(reasons) == 1
    assert reason in reasons[0], reasons[0]
    return reasons


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


def t(*shape: int, **kwargs: Any) -> torch.Tensor:
    return torch.ones(*shape, **kwargs)


def test_tensor_shape() -> None:
    reasons = run_guard_case(
        uses_tensor, lambda: (t(8),), lambda: (t(16),), "x.shape[0] changed from 8 to 16"
    )
    assert "seen at test_guard_kinds.py:" in reasons[0]


def test_tensor_ndim() -> None:
    run_guard_case(uses_tensor, lambda: (t(8),), lambda: (t(8, 1),), "x.ndim changed from 1 to 2")


def test_tensor_dtype() -> None:
    run_guard_case(
        uses_tensor,
        lambda: (t(4),),
        lambda: (t(4, dtype=torch.float64),),
        "x.dtype changed from torch.float32 to torch.float64",
    )


def test_tensor_stride() -> None:
    base = torch.ones(3, 3)
    run_guard_case(uses_tensor, lambda: (base,), lambda: (base.t(),), "x.stride() changed")


def uses_as_strided(x):
    return torch.as_strided(x, (2, 2), (1, 2), 1) * 2


def test_storage_offset_under_as_strided() -> None:
    # as_strided's offset counts from the storage's start, so a Graph that calls it is right
    # only for the input's captured storage offset (inductor returned base[4:] for base[1:]).
    base = torch.arange(20.0)
    run_guard_case(
        uses_as_strided,
        lambda: (base[2:12],),
        lambda: (base[5:15],),
        "x.storage_offset() changed from 2 to 5",
    )


def test_storage_offset_unguarded_without_as_strided() -> None:
    base = torch.arange(20.0)
    counter = CompileCounter()
    compiled = ember_compile(uses_tensor, backend=counter)
    for start in (2, 5, 7):
        assert torch.equal(compiled(base[start : start + 10]), base[start : start + 10] * 2)
    assert counter.frame_count == 1, (
        "a slice at another offset recompiled a Graph without as_strided"
    )


def test_tensor_requires_grad() -> None:
    run_guard_case(
        uses_tensor,
        lambda: (t(4),),
        lambda: (t(4, requires_grad=True),),
        "x.requires_grad changed from False to True",
    )


def test_tensor_type() -> None:
    run_guard_case(
        uses_tensor,
        lambda: (t(4),),
        lambda: (nn.Parameter(t(4)),),
        "type of x changed from Tensor to Parameter",
    )


def test_constant_value() -> None:
    run_guard_case(uses_int, lambda: (t(2), 3), lambda: (t(2), 4), "n changed from 3 to 4")


def test_constant_type() -> None:
    run_guard_case(uses_int, lambda: (t(2), 3), lambda: (t(2), 3.0), "n changed from 3 to 3.0")


def test_sequence_type() -> None:
    run_guard_case(
        uses_sequence,
        lambda: ([t(2), t(2)],),
        lambda: ((t(2), t(2)),),
        "type of xs changed from list to tuple",
    )


def test_list_length() -> None:
    run_guard_case(
        uses_list, lambda: ([t(2), t(2)],), lambda: ([t(2)] * 3,), "len(xs) changed from 2 to 3"
    )


def test_dict_keys() -> None:
    run_guard_case(
        uses_dict,
        lambda: ({"a": t(2)},),
        lambda: ({"a": t(2), "b": t(2)},),
        "the keys of d changed from ['a'] to ['a', 'b']",
    )


MODEL_A = Branchy()
MODEL_B = Branchy()


def test_object_identity() -> None:
    run_guard_case(
        uses_module,
        lambda: (MODEL_A, t(3)),
        lambda: (MODEL_B, t(3)),
        "model is a different object than when it was captured",
    )


def test_training_flag() -> None:
    model = Branchy()
    compiled = ember_compile(model, backend=CompileCounter())
    state = compiled.forward._ember_compiled
    compiled(t(3))
    compiled(t(3))
    assert state.captures == 1
    model.eval()
    compiled(t(3))
    compiled(t(3))
    assert state.captures == 2
    reasons = state.recompile_reasons
    assert "self.linear.training changed from True to False" in reasons[0]


def test_grad_mode() -> None:
    run_guard_case(
        uses_grad_mode,
        lambda: (t(2), t(2, requires_grad=True)),
        lambda: (t(2), t(2, requires_grad=True)),
        "grad mode changed from enabled to disabled",
        context=torch.no_grad,
    )


def test_global_read() -> None:
    global SCALE
    counter = CompileCounter()
    compiled = ember_compile(uses_global, backend=counter)
    x = t(2)
    assert torch.equal(compiled(x), x * 2)
    compiled(x)
    assert counter.frame_count == 1
    SCALE = 5.0
    try:
        assert torch.equal(compiled(x), x * 5)
        compiled(x)
    finally:
        SCALE = 2.0
    assert counter.frame_count == 2
    assert "global SCALE changed from 2.0 to 5.0" in compiled._ember_compiled.recompile_reasons[0]


def test_aliased_inputs() -> None:
    x = t(2)
    run_guard_case(uses_two, lambda: (x, x), lambda: (x, t(2)), "are no longer the same tensor")


def test_recompile_log_names_the_guard(caplog: pytest.LogCaptureFixture) -> None:
    counter = CompileCounter()
    compiled = ember_compile(uses_tensor, backend=counter)
    with caplog.at_level(logging.INFO, logger="ember.capture.recompiles"):
        compiled(t(8))
        compiled(t(16))
    messages = [r.getMessage() for r in caplog.records if r.name == "ember.capture.recompiles"]
    assert len(messages) == 1
    assert "x.shape[0] changed from 8 to 16, seen at test_guard_kinds.py:" in messages[0]


def uses_flag(x, flag):
    return x * 2 if flag else x * 3


def test_bool_constant_is_not_an_equal_int() -> None:
    # a bool constant is checked with `is`: 1 == True, but it is another constant
    run_guard_case(
        uses_flag, lambda: (t(2), True), lambda: (t(2), 1), "flag changed from True to 1"
    )


def test_autocast_state() -> None:
    run_guard_case(
        uses_tensor,
        lambda: (t(2),),
        lambda: (t(2),),
        "autocast changed from off to on (cpu bfloat16)",
        context=lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    )


def test_autocast_dtype() -> None:
    counter = CompileCounter()
    compiled = ember_compile(uses_tensor, backend=counter)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        compiled(t(2))
        compiled(t(2))
    with torch.autocast("cpu", dtype=torch.float16):
        compiled(t(2))
        compiled(t(2))
    assert counter.frame_count == 2
    reasons = compiled._ember_compiled.recompile_reasons
    assert "autocast changed from on (cpu bfloat16) to on (cpu float16)" in reasons[0]


def test_parameter_changed_in_place() -> None:
    # `.data =` and `requires_grad_` keep the Parameter object: its metadata is what changes
    model = Branchy()
    counter = CompileCounter()
    compiled = ember_compile(model, backend=counter)
    x = t(3, dtype=torch.float64)
    model.linear.weight.data = model.linear.weight.data.double()
    model.linear.bias.data = model.linear.bias.data.double()
    compiled(x)
    compiled(x)
    model.linear.weight.requires_grad_(False)
    compiled(x)
    assert counter.frame_count == 2
    model.linear.weight.data = model.linear.weight.data.t().contiguous().t()
    assert torch.equal(compiled(x), model.linear(x))
    assert counter.frame_count == 3
    reasons = compiled.forward._ember_compiled.recompile_reasons
    assert "self.linear.weight.requires_grad changed from True to False" in reasons[0]
    assert "self.linear.weight.stride() changed" in reasons[1]


def test_replaced_parameter_reaches_the_graph() -> None:
    # a new Parameter with the same metadata passes the guards; the inputs the guard check
    # hands to the Graph are the ones it read on this call, not the captured ones
    model = Branchy()
    counter = CompileCounter()
    compiled = ember_compile(model, backend=counter)
    x = t(3)
    compiled(x)
    model.linear.weight = nn.Parameter(torch.randn(3, 3))
    with torch.no_grad():
        model.linear.bias.add_(1.0)
    assert torch.equal(compiled(x), model.linear(x))
    assert counter.frame_count == 1


class SeenOnce:
    seen = False  # a class attribute the first call shadows with an instance attribute


def first_call_adds(x, flag):
    if not flag.seen:
        flag.seen = True
        return x + 1
    return x - 1


def test_class_attribute_shadowed_by_an_instance_write_recompiles() -> None:
    """A class attribute read through the instance is guarded: the first call writes an
    instance attribute over it, so the second takes the other branch, as in eager."""
    flag, reference = SeenOnce(), SeenOnce()
    x = torch.zeros(2)
    compiled = ember_compile(first_call_adds, backend=CompileCounter())
    for _ in range(3):
        torch.testing.assert_close(compiled(x, flag), first_call_adds(x, reference))
