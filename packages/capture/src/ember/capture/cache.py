"""The guarded cache: captured entries per code object, each valid while its guards hold.

A miss recompiles, up to `limit` entries per code object and compile() call; past it the
function runs eagerly for inputs no entry accepts, after one warning that says why.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ember.capture.guards.check import GuardCheck
from ember.prims import Graph

DEFAULT_LIMIT = 8


class RecompileLimitWarning(UserWarning):
    """A function was recompiled up to the cache-size limit and now runs eagerly on misses."""


@dataclass
class CacheEntry:
    """One capture: its guards, the generated entry function and the Graph (None if empty)."""

    check: GuardCheck
    entry: Callable[[dict[str, Any]], Any]
    graph: Graph | None


@dataclass
class CodeEntries:
    """The entries of one code object under one compile() call."""

    entries: list[CacheEntry] = field(default_factory=list)
    warned: bool = False


class CaptureCache:
    """Every cache entry, keyed by code object and the compile() call that made it."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = (
            limit
            if limit is not None
            else int(os.environ.get("EMBER_CACHE_SIZE_LIMIT", DEFAULT_LIMIT))
        )
        self._table: dict[tuple[types.CodeType, int], CodeEntries] = {}

    def entries(self, code: types.CodeType, owner: int) -> CodeEntries:
        key = (code, owner)
        found = self._table.get(key)
        if found is None:
            found = self._table[key] = CodeEntries()
        return found

    def reset(self) -> None:
        """Drop every entry (the next call of each compiled function captures again)."""
        self._table.clear()


CACHE = CaptureCache()
