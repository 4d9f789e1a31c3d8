"""The guarded cache: captured entries per code object, each valid while its guards hold.

A miss recompiles, up to `limit` entries per code object and compile() call; past it the
function runs eagerly for inputs no entry accepts, after one warning that says why. A
recompile that captures a Graph equal to an earlier entry's, under the same grad mode and
autocast state, reuses that entry's compiled callable instead of calling the backend again,
and is checked before that entry. A Graph with size symbols (automatic dynamic's recompile)
is checked first.
"""

from __future__ import annotations

import os
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ember.capture.breaks import GraphBreak
from ember.capture.guards.check import GuardCheck
from ember.capture.guards.source import Source
from ember.prims import Graph, dumps

DEFAULT_LIMIT = 8


class RecompileLimitWarning(UserWarning):
    """A function was recompiled up to the cache-size limit and now runs eagerly on misses."""


@dataclass
class CacheEntry:
    """One capture: its guards, the generated entry function, the Graph (None if empty) and
    the graph break that ended it, if any. `entry(arguments, inputs)` takes the Graph's
    inputs as `check.check_inputs(arguments, globals)` returns them."""

    check: GuardCheck
    entry: Callable[[dict[str, Any], tuple[Any, ...]], Any]
    graph: Graph | None
    breaks: list[GraphBreak] = field(default_factory=list)
    # the sizes of the tensor inputs it was captured with (automatic dynamic compares them)
    shapes: list[tuple[Source, tuple[int, ...]]] = field(default_factory=list)


@dataclass(eq=False)
class CodeEntries:
    """The entries of one code object under one compile() call."""

    code: types.CodeType
    entries: list[CacheEntry] = field(default_factory=list)
    warned: bool = False
    # What the backend returned for each Graph it compiled here: (Graph, the grad mode and
    # autocast state it was compiled under, the compiled callable).
    compiled: list[tuple[Graph, tuple[Any, ...], Callable[..., Any]]] = field(default_factory=list)
    # (source, dim) pairs automatic dynamic has learnt for this code (DynamicPolicy)
    automatic: set[tuple[Source, int]] = field(default_factory=set)
    # the entry captured last: a recompile's reason is why its guards failed
    latest: CacheEntry | None = None

    def add(self, entry: CacheEntry, reused: bool) -> None:
        """Keep `entry`, checked after the others, except one whose Graph reused an earlier
        entry's compiled code (`reused`): it goes just before the first entry with an equal
        Graph. Both run the same code, and the newer guards are the ones later calls meet:
        transformers' loss writes config.problem_type on its first call, so the first entry
        of a classifier's training step fails on every later call, after ~2000 guards
        (ResNet-50: 0.4 ms of a step on the H100 host)."""
        self.latest = entry
        if not reused and entry.graph is not None and entry.graph.symbols and self.entries:
            # automatic dynamic: the symbolic recompile is the general entry the next calls
            # meet; checked last, every call at a new size first failed the static entry and
            # each narrower symbolic one (GPT-2 small on the H100 host: ~60 us a failed check)
            self.entries.insert(0, entry)
            return
        if reused and entry.graph is not None:
            program = _program(entry.graph)
            for index, older in enumerate(self.entries):
                if (
                    older.graph is not None
                    and _same_constants(older.graph, entry.graph)
                    and _program(older.graph) == program
                ):
                    self.entries.insert(index, entry)
                    return
        self.entries.append(entry)

    def compiled_for(self, graph: Graph, state: tuple[Any, ...]) -> Callable[..., Any] | None:
        """The callable compiled earlier for a Graph that serializes as `graph` does (its
        provenance aside: literals keep their types, 3 is not 3.0) under the same `state`."""
        candidates = [
            (known, compiled)
            for known, s, compiled in self.compiled
            if s == state and _same_constants(known, graph)
        ]
        if not candidates:
            return None
        program = _program(graph)
        for known, compiled in candidates:
            if len(known.nodes) == len(graph.nodes) and _program(known) == program:
                return compiled
        return None


def _same_constants(known: Graph, graph: Graph) -> bool:
    """Whether both Graphs hold the very same constant tensors: a backend may keep them
    (live tensors, not copies), so equal values in other tensors are not enough."""
    return known.constants.keys() == graph.constants.keys() and all(
        known.constants[name] is tensor for name, tensor in graph.constants.items()
    )


def _program(graph: Graph) -> bytes:
    return dumps(replace(graph, meta={}))


class CaptureCache:
    """Every table of cache entries (held weakly: a table lives as long as its compile())."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = (
            limit
            if limit is not None
            else int(os.environ.get("EMBER_CACHE_SIZE_LIMIT", DEFAULT_LIMIT))
        )
        self._tables: weakref.WeakSet[CodeEntries] = weakref.WeakSet()

    def table(self, code: types.CodeType) -> CodeEntries:
        """A new, empty table for `code`, which reset() will clear."""
        entries = CodeEntries(code)
        self._tables.add(entries)
        return entries

    def reset(self) -> None:
        """Drop every entry (the next call of each compiled function captures again)."""
        for table in list(self._tables):
            table.entries.clear()
            table.compiled.clear()
            table.automatic.clear()
            table.warned = False
            table.latest = None


CACHE = CaptureCache()
