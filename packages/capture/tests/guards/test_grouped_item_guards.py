"""Guards on many items of one dict, list or tuple (`config.id2label[i]`, `LOSS_MAPPING[k]`)
checked as one test: the check still fails whenever one item's guard fails (a changed value,
an equal value of another type, a swapped object, a missing key), still holds when every item
guard holds (extra keys), and compiled results equal eager before and after a recompile."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ember.capture.compile import compile as ember_compile
from ember.capture.guards.check import build_check
from ember.capture.guards.kinds import Guard, GuardKind
from ember.capture.guards.source import ItemSource, LocalSource
from ember.capture.testing import CompileCounter


class Label(str):
    """A str subclass: equal to a plain str, but not of its type."""


def _item_guards(kind: GuardKind, expected: dict[Any, Any]) -> list[Guard]:
    table = LocalSource("table")
    guards = [Guard(GuardKind.TYPE, table, type(expected))]
    guards += [Guard(kind, ItemSource(table, key), value) for key, value in expected.items()]
    return guards


def _each_holds(guards: list[Guard], arguments: dict[str, Any]) -> bool:
    return all(guard.failure(arguments, {}) is None for guard in guards)


LABELS = {0: "tench", 1: "goldfish", 2: "shark", 3: "tiger shark", 4: "hammerhead", 5: True}


@pytest.mark.parametrize(
    "table",
    [
        dict(LABELS),
        {**LABELS, 9: "extra"},  # keys no guard reads
        {**LABELS, 3: "tiger"},
        {**LABELS, 3: Label("tiger shark")},  # equal, not a str
        {**LABELS, 5: 1},  # equal to True, not a bool
        {k: v for k, v in LABELS.items() if k != 4},  # a key gone
        list(LABELS.values()),  # not a dict
    ],
)
def test_constant_items_checked_together_answer_as_each_guard(table: Any) -> None:
    guards = _item_guards(GuardKind.CONSTANT, LABELS)
    check = build_check(guards, native=None)
    arguments = {"table": table}
    assert check(arguments, {}) is _each_holds(guards, arguments)
    assert (check.check_inputs(arguments, {}) is not None) is _each_holds(guards, arguments)


FUNCTIONS = {"a": torch.sin, "b": torch.cos, "c": torch.tanh, "d": torch.exp, "e": torch.neg}


@pytest.mark.parametrize(
    "table",
    [
        dict(FUNCTIONS),
        {**FUNCTIONS, "c": torch.sigmoid},
        {**FUNCTIONS, "e": torch.neg, "f": torch.abs},
        {k: v for k, v in FUNCTIONS.items() if k != "a"},
    ],
)
def test_identity_items_checked_together_answer_as_each_guard(table: Any) -> None:
    guards = _item_guards(GuardKind.ID, FUNCTIONS)
    check = build_check(guards, native=None)
    arguments = {"table": table}
    assert check(arguments, {}) is _each_holds(guards, arguments)


def test_list_items_checked_together_answer_as_each_guard() -> None:
    values = [3, 4, 5, 6, 7]
    guards = _item_guards(GuardKind.CONSTANT, dict(enumerate(values)))
    guards[0] = Guard(GuardKind.TYPE, LocalSource("table"), list)
    check = build_check(guards, native=None)
    assert check({"table": [3, 4, 5, 6, 7, 8]}, {}) is True
    assert check({"table": [3, 4, 5, 6, 8]}, {}) is False
    assert check({"table": [3, 4, 5, 6]}, {}) is False
    assert check({"table": (3, 4, 5, 6, 7)}, {}) is False


def uses_labels(x: torch.Tensor, labels: dict[int, str]) -> torch.Tensor:
    total = 0
    for index in range(6):
        total += len(labels[index])
    return x * total


def uses_functions(x: torch.Tensor, table: dict[str, Any]) -> torch.Tensor:
    for name in ("a", "b", "c", "d", "e"):
        x = table[name](x)
    return x


def _compile_twice(fn: Any, first: tuple[Any, ...], second: tuple[Any, ...]) -> list[str]:
    compiled = ember_compile(fn, backend=CompileCounter())
    state = compiled._ember_compiled
    for arguments in (first, first, second, second):
        torch.testing.assert_close(compiled(*arguments), fn(*arguments))
    assert state.captures == 2, "the changed item did not cause exactly one recompile"
    return state.recompile_reasons


def test_changed_label_recompiles_with_its_reason() -> None:
    labels = {i: name for i, name in enumerate(["a", "bb", "ccc", "dddd", "eeeee", "f"])}
    changed = {**labels, 3: "DDDD"}  # same length: the same result, still a changed constant
    reasons = _compile_twice(uses_labels, (torch.ones(3), labels), (torch.ones(3), changed))
    assert len(reasons) == 1
    assert reasons[0].startswith("labels[3] changed from 'dddd' to 'DDDD'"), reasons


def test_swapped_function_recompiles_and_matches_eager() -> None:
    x = torch.linspace(-1, 1, 5)
    reasons = _compile_twice(
        uses_functions, (x, dict(FUNCTIONS)), (x, {**FUNCTIONS, "c": torch.sigmoid})
    )
    assert len(reasons) == 1 and "table['c']" in reasons[0], reasons
