"""The corpus harness: one small program per table entry, compiled with a counting eager
backend and compared with eager PyTorch: outputs, the inputs afterwards (mutations), the
state a program writes elsewhere (`state`), and the graph and break counts on two calls."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ember.capture.compile import compile as ember_compile
from ember.capture.explain import collecting
from ember.capture.testing import CompileCounter


@dataclass
class Case:
    """A program, a factory of its inputs, and how many graphs it must capture."""

    fn: Callable[..., Any]
    inputs: Callable[[], tuple[Any, ...]]
    graphs: int = 1
    kwargs: dict[str, Any] = field(default_factory=dict)
    breaks: int = 0
    # Reads state the program writes outside its inputs (globals, objects); compared too.
    state: Callable[[], Any] | None = None
    # Resets that state before each run.
    reset: Callable[[], None] | None = None
    # Each run gets fresh copies of the inputs; False shares them (modules as arguments,
    # whose identity is guarded, in programs that do not mutate them).
    copy_inputs: bool = True
    # Counts on Python 3.12 where they differ: 3.12 inlines comprehensions into the function
    # (PEP 709), so a break inside one resumes in the same frame instead of a callee's.
    py312: tuple[int, int] | None = None  # (graphs, breaks)

    def expected_counts(self) -> tuple[int, int]:
        if self.py312 is not None and sys.version_info >= (3, 12):
            return self.py312
        return self.graphs, self.breaks

    @property
    def id(self) -> str:
        return getattr(self.fn, "__name__", "case")


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _run(case: Case, fn: Callable[..., Any], inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    if case.reset is not None:
        case.reset()
    arguments = copy.deepcopy(inputs) if case.copy_inputs else inputs
    result = fn(*arguments, **case.kwargs)
    state = case.state() if case.state is not None else None
    return result, arguments, state


def check(case: Case) -> None:
    torch.manual_seed(0)
    inputs = case.inputs()
    expected = _run(case, case.fn, inputs)
    counter = CompileCounter()
    compiled = ember_compile(case.fn, backend=counter)
    with collecting() as seen:
        actual = _run(case, compiled, inputs)
    assert_same(actual, expected)
    graphs, breaks = case.expected_counts()
    assert counter.frame_count == graphs, f"captured {counter.frame_count} graphs"
    assert seen.break_count == breaks, f"{seen.break_count} breaks: {seen.breaks}"
    again = _run(case, compiled, inputs)
    assert_same(again, expected)
    assert counter.frame_count == graphs, "a second identical call recompiled"


def assert_same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), f"{type(actual)} != {type(expected)}"
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, equal_nan=True)
        assert actual.requires_grad == expected.requires_grad
    elif isinstance(expected, (type({}.keys()), type({}.values()), type({}.items()))):
        assert_same(list(actual), list(expected))
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_same(actual[key], expected[key])
    elif isinstance(expected, torch.nn.Module):
        assert_same(expected.state_dict(), actual.state_dict())
        assert_same(_plain_attributes(actual), _plain_attributes(expected))
    elif hasattr(expected, "__dict__") and not isinstance(expected, type):
        assert_same(vars(actual), vars(expected))
    else:
        assert actual == expected


def _plain_attributes(module: torch.nn.Module) -> dict[str, Any]:
    return {k: v for k, v in vars(module).items() if not k.startswith("_")}


def cases(*entries: Case) -> list[Any]:
    """pytest parameters with readable ids."""
    import pytest

    return [pytest.param(entry, id=entry.id) for entry in entries]
