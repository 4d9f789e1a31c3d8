"""`minify`: shrink a failing Graph, node by node, while its failure persists.

Two passes over the node positions, each candidate checked by compiling and running it
(`probe`): first the shortest failing prefix (bisection: a failure usually sits at one node
and everything after it is noise), then delta debugging (Zeller's ddmin: drop ever smaller
chunks of nodes, keep any cut that still fails the same way). Cutting a node turns the
values it computed into inputs (`subgraph.Cutter`), so the survivors are the nodes the
failure needs plus the inputs they read. Candidates are cached; `max_trials` bounds the work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ember.prims.graph import Graph
from ember.prims.minify.failure import Backend, Failure, probe
from ember.prims.minify.subgraph import Cutter


@dataclass
class Minified:
    """The smallest failing Graph found, its inputs, and how the search went."""

    graph: Graph
    inputs: list[Any]
    failure: Failure
    original_nodes: int
    trials: int
    seconds: float
    log: list[str] = field(default_factory=list)


class _Search:
    def __init__(
        self,
        backend: Backend,
        cutter: Cutter,
        failure: Failure,
        check_accuracy: bool,
        max_trials: int,
        report: Callable[[str], None],
    ) -> None:
        self.backend = backend
        self.cutter = cutter
        self.failure = failure
        self.check_accuracy = check_accuracy
        self.max_trials = max_trials
        self.report = report
        self.trials = 0
        self.cache: dict[frozenset[int], bool] = {}

    def fails(self, keep: Sequence[int]) -> bool:
        key = frozenset(keep)
        if not key:
            return False
        if key in self.cache:
            return self.cache[key]
        if self.trials >= self.max_trials:
            return False
        self.trials += 1
        try:
            graph, inputs = self.cutter.cut(key)
            graph.verify()
        except Exception:  # noqa: BLE001 - a cut the format rejects is no candidate
            self.cache[key] = False
            return False
        found = probe(self.backend, graph, inputs, check_accuracy=self.check_accuracy)
        result = self.failure.same_as(found)
        self.cache[key] = result
        self.report(f"trial {self.trials}: {len(key)} nodes: {'fails' if result else 'passes'}")
        return result

    def shortest_prefix(self, count: int) -> list[int]:
        low, high = 1, count  # the full Graph (prefix `count`) fails
        while low < high:
            middle = (low + high) // 2
            if self.fails(range(middle)):
                high = middle
            else:
                low = middle + 1
        return list(range(high))

    def ddmin(self, items: list[int]) -> list[int]:
        granularity = 2
        while len(items) >= 2:
            size = max(1, len(items) // granularity)
            chunks = [items[i : i + size] for i in range(0, len(items), size)]
            reduced = False
            for chunk in chunks:
                complement = [i for i in items if i not in chunk]
                if self.fails(complement):
                    items, granularity, reduced = complement, max(granularity - 1, 2), True
                    break
            if not reduced:
                for chunk in chunks:
                    if len(chunk) < len(items) and self.fails(chunk):
                        items, granularity, reduced = chunk, 2, True
                        break
            if not reduced:
                if granularity >= len(items):
                    break
                granularity = min(len(items), granularity * 2)
        return items


def minify(
    backend: Backend,
    graph: Graph,
    inputs: Sequence[Any],
    *,
    failure: Failure | None = None,
    check_accuracy: bool = True,
    max_trials: int = 300,
    report: Callable[[str], None] | None = None,
) -> Minified:
    """The smallest Graph of `graph`'s nodes that `backend` still fails on the same way.

    `failure` is the failure to keep (default: probe the whole Graph first; it must fail).
    `report` receives one line per trial (progress for a long search)."""
    started = time.perf_counter()
    log: list[str] = []

    def note(line: str) -> None:
        log.append(line)
        if report is not None:
            report(line)

    if failure is None:
        failure = probe(backend, graph, inputs, check_accuracy=check_accuracy)
        if failure is None:
            raise ValueError(
                f"the backend compiles and runs Graph {graph.name} on these inputs without a "
                "failure: nothing to minify"
            )
    cutter = Cutter(graph, inputs)
    search = _Search(backend, cutter, failure, check_accuracy, max_trials, note)
    count = len(graph.nodes)
    keep = search.shortest_prefix(count) if count > 1 else list(range(count))
    note(f"shortest failing prefix: {len(keep)} of {count} nodes")
    keep = search.ddmin(keep)
    note(f"delta debugging: {len(keep)} nodes after {search.trials} trials")
    small, small_inputs = cutter.cut(keep)
    found = probe(backend, small, small_inputs, check_accuracy=check_accuracy)
    if not failure.same_as(found):  # a flaky failure: keep the whole Graph
        small, small_inputs, found = graph, list(inputs), failure
    assert found is not None
    return Minified(
        small,
        small_inputs,
        found,
        count,
        search.trials,
        time.perf_counter() - started,
        log,
    )
