"""The corpus harness: one small program per table entry, compiled with a counting eager
backend and compared with eager PyTorch (outputs, and graph count on two calls)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ember.capture.compile import compile as ember_compile
from ember.capture.testing import CompileCounter


@dataclass
class Case:
    """A program, a factory of its inputs, and how many graphs it must capture."""

    fn: Callable[..., Any]
    inputs: Callable[[], tuple[Any, ...]]
    graphs: int = 1
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return getattr(self.fn, "__name__", "case")


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def check(case: Case) -> None:
    torch.manual_seed(0)
    inputs = case.inputs()
    expected = case.fn(*copy.deepcopy(inputs), **case.kwargs)
    counter = CompileCounter()
    compiled = ember_compile(case.fn, backend=counter)
    actual = compiled(*copy.deepcopy(inputs), **case.kwargs)
    assert_same(actual, expected)
    assert counter.frame_count == case.graphs, f"captured {counter.frame_count} graphs"
    again = compiled(*copy.deepcopy(inputs), **case.kwargs)
    assert_same(again, expected)
    assert counter.frame_count == case.graphs, "a second identical call recompiled"


def assert_same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), f"{type(actual)} != {type(expected)}"
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, equal_nan=True)
        assert actual.requires_grad == expected.requires_grad
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_same(actual[key], expected[key])
    else:
        assert actual == expected


def cases(*entries: Case) -> list[Any]:
    """pytest parameters with readable ids."""
    import pytest

    return [pytest.param(entry, id=entry.id) for entry in entries]
