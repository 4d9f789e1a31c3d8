"""The corpus again under dynamic=True: each program is captured with symbolic sizes, then
called with inputs whose dims of size 2 or more have grown by 2, and compared with eager
PyTorch on those inputs (outputs, inputs afterwards, written state). Programs that eager
rejects at the grown sizes are skipped."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from capture_corpus_support import Case, _run, assert_same
from test_corpus_breaks import CASES as BREAKS
from test_corpus_calls import CASES as CALLS
from test_corpus_control import CASES as CONTROL
from test_corpus_library import CASES as LIBRARY
from test_corpus_operators import CASES as OPERATORS
from test_corpus_python import CASES as PYTHON
from test_corpus_side_effects import CASES as SIDE_EFFECTS
from test_corpus_tensors import CASES as TENSORS

from ember.capture.compile import compile as ember_compile
from ember.capture.testing import CompileCounter

ALL = [*OPERATORS, *TENSORS, *PYTHON, *CONTROL, *CALLS, *LIBRARY, *SIDE_EFFECTS, *BREAKS]


def grown(value: Any) -> Any:
    """`value` with every plain tensor's dims of size 2 or more grown by 2 (new values)."""
    if type(value) in (torch.Tensor, torch.nn.Parameter):
        shape = [size + 2 if size >= 2 else size for size in value.shape]
        if value.dtype.is_floating_point:
            tensor = torch.randn(shape, dtype=value.dtype)
            return tensor.requires_grad_(value.requires_grad)
        if value.dtype is torch.bool:
            return torch.rand(shape) > 0.5
        return torch.randint(0, 2, shape, dtype=value.dtype)
    if type(value) in (list, tuple):
        return type(value)(grown(item) for item in value)
    if type(value) is dict:
        return {key: grown(item) for key, item in value.items()}
    return value


@pytest.mark.parametrize("case", ALL)
def test_symbolic_graphs_match_eager_at_other_sizes(case: Case) -> None:
    torch.manual_seed(0)
    first = case.inputs()
    other = grown(case.inputs())
    try:
        expected = _run(case, case.fn, other)
    except Exception:  # noqa: BLE001 - the program needs its sizes: nothing to compare
        pytest.skip("eager rejects the grown inputs")
    compiled = ember_compile(case.fn, backend=CompileCounter(), dynamic=True)
    _run(case, compiled, first)
    assert_same(_run(case, compiled, other), expected)
