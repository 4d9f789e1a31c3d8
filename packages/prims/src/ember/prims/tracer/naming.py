"""Unique, readable value names for a Graph (`addmm`, `addmm_1`, `l1_weight`)."""

from __future__ import annotations

import keyword
import re

_INVALID = re.compile(r"[^0-9A-Za-z_]")


def sanitize(name: str) -> str:
    """A valid Python identifier close to `name`."""
    text = _INVALID.sub("_", name) or "v"
    if text[0].isdigit():
        text = f"v_{text}"
    if keyword.iskeyword(text) or text in ("self", "state", "aten"):
        text = f"{text}_"
    return text


class Namer:
    """Hands out unique identifiers derived from hints."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._counters: dict[str, int] = {}

    def fresh(self, hint: str) -> str:
        base = sanitize(hint)
        candidate = base
        while candidate in self._used:
            count = self._counters.get(base, 0) + 1
            self._counters[base] = count
            candidate = f"{base}_{count}"
        self._used.add(candidate)
        return candidate
