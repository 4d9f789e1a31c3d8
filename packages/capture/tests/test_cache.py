"""The guarded cache: several entries per code object, the size limit with its one warning,
and reset()."""

from __future__ import annotations

import warnings

import pytest
import torch

from ember.capture.cache import CACHE, RecompileLimitWarning
from ember.capture.compile import compile as ember_compile
from ember.capture.compile import reset
from ember.capture.testing import CompileCounter, ConfigWritingClassifier


def scaled(x, n):
    return x * n


def test_entries_are_reused() -> None:
    counter = CompileCounter()
    compiled = ember_compile(scaled, backend=counter)
    x = torch.ones(2)
    for n in (1, 2, 3, 1, 2, 3):
        assert torch.equal(compiled(x, n), x * n)
    assert counter.frame_count == 3


def test_cache_limit_falls_back_to_eager_with_one_warning() -> None:
    counter = CompileCounter()
    compiled = ember_compile(scaled, backend=counter)
    x = torch.ones(2)
    for n in range(CACHE.limit):
        compiled(x, n)
    assert counter.frame_count == CACHE.limit
    with pytest.warns(RecompileLimitWarning, match=r"cache size limit.*n changed from 7 to 100"):
        assert torch.equal(compiled(x, 100), x * 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(compiled(x, 101), x * 101)
        assert torch.equal(compiled(x, 3), x * 3)  # cached entries still serve
    assert counter.frame_count == CACHE.limit
    assert compiled._ember_compiled.eager_fallbacks == 2


def test_reset_captures_again() -> None:
    counter = CompileCounter()
    compiled = ember_compile(scaled, backend=counter)
    compiled(torch.ones(2), 2)
    reset()
    compiled(torch.ones(2), 2)
    assert counter.frame_count == 2


def test_a_recompile_to_the_same_graph_reuses_its_compiled_code() -> None:
    """The first call writes the attribute the guards read, so the second recompiles: to an
    equal Graph, whose compiled callable is reused (the backend sees one Graph)."""
    torch.manual_seed(0)
    model = ConfigWritingClassifier()
    x = torch.randn(2, 4)
    counter = CompileCounter()
    compiled = ember_compile(model, backend=counter)
    expected = model.linear(x).log_softmax(-1)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), expected)
    assert model.config.problem_type == "single_label_classification"
    assert len(compiled.forward._ember_compiled.table.entries) == 2  # it did recompile
    assert counter.frame_count == 1


def test_a_recompile_under_another_grad_mode_compiles_again() -> None:
    """An equal Graph captured under another grad mode is compiled again (a backend compiles
    a training Graph differently)."""
    model = ConfigWritingClassifier()
    x = torch.randn(2, 4)
    counter = CompileCounter()
    compiled = ember_compile(model, backend=counter)
    model.config.problem_type = "single_label_classification"
    compiled(x)
    with torch.no_grad():
        compiled(x)
    assert counter.frame_count == 2
    reset()
    compiled(x)
    assert counter.frame_count == 3  # reset() forgets compiled code too


def adds_a_literal(x, n):
    return x + torch.tensor([1.0, 2.0]) * 0 + n * 0


def test_graphs_with_other_constant_tensors_are_compiled_again() -> None:
    """Each capture makes its own constant tensor: a backend may keep the tensors it was
    given, so a Graph that holds other tensor objects is not served another's code."""
    counter = CompileCounter()
    compiled = ember_compile(adds_a_literal, backend=counter)
    x = torch.ones(2)
    for n in (1, 2):
        torch.testing.assert_close(compiled(x, n), adds_a_literal(x, n))
    assert compiled._ember_compiled.captures == 2
    assert counter.frame_count == 2
