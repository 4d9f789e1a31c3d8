"""The guarded cache: several entries per code object, the size limit with its one warning,
and reset()."""

from __future__ import annotations

import warnings

import pytest
import torch

from ember.capture.cache import CACHE, RecompileLimitWarning
from ember.capture.compile import compile as ember_compile
from ember.capture.compile import reset
from ember.capture.testing import CompileCounter


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
