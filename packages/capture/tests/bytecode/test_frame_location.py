"""The interpreter reads each source line's text once per frame, not once per instruction
(it sets the session's location before every instruction: 4,378 reads in a warm GPT-2
capture), and every recorded node still names its line."""

from __future__ import annotations

import linecache
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from ember.capture.compile import compile as ember_compile
from ember.prims import Graph, Interpreter


def _many_instructions_per_line(x: torch.Tensor) -> torch.Tensor:
    y = x.sin() + x.cos() * 2 + x.tanh() - x.exp() / 3 + x.abs() + x.sigmoid()
    return y * y.sum() + x.mean() - x.amax() + x.amin()


def test_a_line_is_read_once_per_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    original = linecache.getline

    def getline(filename: str, lineno: int, module_globals: Any = None) -> str:
        if filename == __file__ and sys._getframe(1).f_code.co_name == "location":
            reads.append(lineno)  # the interpreter's reads (the tracer reads the stack too)
        return original(filename, lineno, module_globals)

    graphs: list[Graph] = []

    def backend(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        graphs.append(graph)
        return Interpreter(graph)

    monkeypatch.setattr(linecache, "getline", getline)
    compiled = ember_compile(_many_instructions_per_line, backend=backend)
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), _many_instructions_per_line(x))
    start = _many_instructions_per_line.__code__.co_firstlineno
    assert sorted(set(reads)) == [start, start + 1, start + 2]
    assert len(reads) <= 6  # once per line and frame, not once per instruction (about 50)
    lines = {node.source.line for node in graphs[0].nodes if node.source is not None}
    assert lines == {start + 1, start + 2}
