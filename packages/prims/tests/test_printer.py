"""Printing: a Graph reads as short Python with the user's lines as comments."""

from __future__ import annotations

import ast

import torch

from ember.prims import format_graph, trace


def double_then_sum(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = x * 2
    return (z + y).sum()


def test_prints_one_line_per_node_with_source_comments() -> None:
    graph = trace(double_then_sum, torch.randn(3), torch.randn(3))
    text = format_graph(graph)
    lines = text.splitlines()
    assert lines[0] == 'def double_then_sum(x: "f32[3]", y: "f32[3]"):'
    assert "    # test_printer.py:13: z = x * 2" in lines
    assert '    mul: "f32[3]" = aten.mul.Tensor(x, 2)' in lines
    assert lines[-1] == "    return sum_1" or lines[-1].startswith("    return sum")
    assert str(graph) == text


def test_printed_graph_is_valid_python() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    graph = trace(model, torch.randn(2, 4))
    ast.parse(format_graph(graph))


def test_symbols_and_guards_are_listed() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 3:
            return x.view(x.shape[0], -1)
        return x

    graph = trace(fn, torch.randn(5, 2, 2), dynamic=True)
    text = format_graph(graph)
    assert "# symbol s0 in [2, inf], hint 5" in text
    assert "# guard" in text and "test_printer.py" in text
    ast.parse(text)
