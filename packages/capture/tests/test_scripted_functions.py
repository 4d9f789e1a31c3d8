"""TorchScript functions are captured through the Python function they were made from.

Calling the TorchScript function itself with tracing tensors let TorchScript's fuser launch a
kernel on the tracing tensors' (absent) data on the GPU: DeBERTa-v2 died with an illegal memory
access on the H100. Capture now reads the Python original, so the graph names its lines.
"""

from __future__ import annotations

import torch

from ember.capture import explain
from ember.capture.compile import compile as ember_compile


@torch.jit.script
def bucket(relative: torch.Tensor, size: int) -> torch.Tensor:
    sign = torch.sign(relative)
    middle = size // 2
    absolute = torch.where((relative < middle) & (relative > -middle), middle - 1, relative.abs())
    return torch.where(absolute <= middle, relative, absolute * sign)


def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


traced_scaled = torch.jit.trace(scaled, torch.ones(3))


def uses_scripted(x: torch.Tensor) -> torch.Tensor:
    return bucket(x, 4).float() + 1


def uses_traced(x: torch.Tensor) -> torch.Tensor:
    return traced_scaled(x).sin()


def test_scripted_function_is_captured_from_its_python_source() -> None:
    x = torch.arange(-6, 6)
    result = explain(uses_scripted)(x)
    assert len(result.graphs) == 1 and result.breaks == []
    lines = {node.source.code for node in result.graphs[0].nodes if node.source is not None}
    # the nodes name the scripted function's own lines, not only the caller's
    assert any("torch.sign(relative)" in line for line in lines), lines
    assert any("absolute * sign" in line for line in lines), lines
    torch.testing.assert_close(ember_compile(uses_scripted, backend="eager")(x), uses_scripted(x))


def test_traced_function_is_captured_from_its_python_source() -> None:
    x = torch.randn(5)
    result = explain(uses_traced)(x)
    assert len(result.graphs) == 1 and result.breaks == []
    lines = {node.source.code for node in result.graphs[0].nodes if node.source is not None}
    assert any("x * 2" in line for line in lines), lines
    torch.testing.assert_close(ember_compile(uses_traced, backend="eager")(x), uses_traced(x))


scripted_block = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU()))


def uses_scripted_module(x: torch.Tensor) -> torch.Tensor:
    return scripted_block(x.cos()) + 1


def test_scripted_module_runs_eagerly_between_graphs() -> None:
    x = torch.randn(2, 3)
    result = explain(uses_scripted_module)(x)
    (broken,) = result.breaks
    assert "a TorchScript module" in broken.message
    assert "uses_scripted_module" in broken.location.function
    compiled = ember_compile(uses_scripted_module, backend="eager")
    torch.testing.assert_close(compiled(x), uses_scripted_module(x))
