"""Test helpers for capture: `CompileCounter`, a backend that counts the graphs it gets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember.capture.backends.eager import eager
from ember.prims import Graph


class CompileCounter:
    """A backend that runs Graphs eagerly and remembers each one (`frame_count`, `graphs`)."""

    def __init__(self) -> None:
        self.graphs: list[Graph] = []

    @property
    def frame_count(self) -> int:
        return len(self.graphs)

    @property
    def op_count(self) -> int:
        return sum(len(graph.nodes) for graph in self.graphs)

    def __call__(self, graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        graph.verify()
        self.graphs.append(graph)
        return eager(graph, example_inputs)

    def clear(self) -> None:
        self.graphs.clear()
