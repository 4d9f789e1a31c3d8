"""With fullgraph=True, constructs capture does not model raise `Unsupported`, naming the
user's line and the construct."""

from __future__ import annotations

import sys

import pytest
import torch

from ember.capture import CaptureError
from ember.capture.compile import compile as ember_compile
from ember.capture.compile import disable
from ember.capture.testing import CompileCounter
from ember.capture.unsupported import Unsupported


def prints(x):
    print("hello")
    return x


def data_dependent_if(x):
    if x.sum() > 0:
        return x
    return -x


def reads_item(x):
    return x * x.sum().item()


def imports(x):
    import colorsys

    return x * colorsys.ONE_THIRD


@disable
def opaque(x):
    return x + 1


def calls_disabled(x):
    return opaque(x) * 2


@pytest.mark.parametrize(
    "fn,construct",
    [
        (prints, "print()"),
        (data_dependent_if, "control flow that depends on a tensor's value"),
        (reads_item, "reading a tensor value into Python (.item())"),
        (imports, "importing colorsys"),
        (calls_disabled, "marked ember.capture.disable"),
    ],
)
def test_unsupported_names_line_and_construct(fn, construct: str) -> None:
    sys.modules.pop("colorsys", None)  # an import of a module not imported yet breaks
    compiled = ember_compile(fn, backend=CompileCounter(), fullgraph=True)
    with pytest.raises(Unsupported) as info:
        compiled(torch.ones(2))
    message = str(info.value)
    assert construct in message
    assert "test_unsupported.py:" in message
    assert isinstance(info.value, CaptureError)


def test_disabled_function_runs_eagerly() -> None:
    assert torch.equal(opaque(torch.ones(2)), torch.full((2,), 2.0))


def test_a_sparse_tensor_argument_runs_eagerly() -> None:
    """Graphs hold strided tensors; a sparse CSR argument crashed capture (no strides)."""

    def sparse_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(a, b) * 2

    a, b = torch.eye(3).to_sparse_csr(), torch.randn(3, 2)
    torch.testing.assert_close(ember_compile(sparse_matmul, backend="eager")(a, b), 2 * b)
    with pytest.raises(Unsupported, match="sparse_csr"):
        ember_compile(sparse_matmul, backend="eager", fullgraph=True)(a, b)
