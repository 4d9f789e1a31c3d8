"""`explain(fn)(*args)`: run `fn` once under capture and report what happened.

The result counts the graphs and the graph breaks (each with its reason in plain words, the
catalogue id and the user's file and line), and keeps every Graph and guard; `str()` of it
is a short readable report. Captures report into the active result through a contextvar
set here, at the entry point.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ember.capture.breaks import GraphBreak
from ember.prims import Graph

if TYPE_CHECKING:
    from ember.capture.cache import CacheEntry


@dataclass
class ExplainResult:
    """What one call captured: graphs, breaks and guards, in the order they happened."""

    graphs: list[Graph] = field(default_factory=list)
    breaks: list[GraphBreak] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    output: Any = None

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def break_count(self) -> int:
        return len(self.breaks)

    @property
    def ops_per_graph(self) -> list[int]:
        return [len(graph.nodes) for graph in self.graphs]

    def __str__(self) -> str:
        lines = [
            f"{self.graph_count} graph(s), {self.break_count} graph break(s); "
            f"ops per graph: {self.ops_per_graph}"
        ]
        for number, graph_break in enumerate(self.breaks, 1):
            lines.append(f"  break {number}: {graph_break}")
            lines.append(f"    hint: {graph_break.hint}")
        lines.append(f"{len(self.guards)} guard(s)")
        return "\n".join(lines)


_ACTIVE: contextvars.ContextVar[ExplainResult | None] = contextvars.ContextVar(
    "ember_capture_explain", default=None
)


def record(entry: CacheEntry) -> None:
    """Add a new cache entry's graph, breaks and guards to the active explain() call."""
    result = _ACTIVE.get()
    if result is None:
        return
    if entry.graph is not None:
        result.graphs.append(entry.graph)
    result.breaks.extend(entry.breaks)
    for guard in entry.check.guards:
        where = guard.source.name() if guard.source is not None else ""
        result.guards.append(f"{guard.kind.value} {where}".strip())


@contextlib.contextmanager
def collecting() -> Iterator[ExplainResult]:
    """Collect what every capture inside the block does (explain() without the call)."""
    result = ExplainResult()
    token = _ACTIVE.set(result)
    try:
        yield result
    finally:
        _ACTIVE.reset(token)


def explain(fn: Any, backend: Any = "eager") -> Callable[..., ExplainResult]:
    """`explain(fn)(*args, **kwargs)` captures `fn` afresh, runs it once on the arguments
    and returns an ExplainResult (its `output` is what `fn` returned)."""
    from ember.capture.compile import compile as ember_compile

    def run(*args: Any, **kwargs: Any) -> ExplainResult:
        compiled = ember_compile(fn, backend=backend)
        with collecting() as result:
            result.output = compiled(*args, **kwargs)
        return result

    return run
