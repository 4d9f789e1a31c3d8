"""Compile a list of guards into one fast check, and explain the first failing guard.

The check is one generated Python function `check(L, G)` whose body is the conjunction of
every guard's expression; any exception while reading a source counts as a miss.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ember.capture.guards.kinds import Guard
from ember.capture.guards.source import Source


@dataclass
class GuardCheck:
    """The guards of one cache entry and their compiled check."""

    guards: list[Guard]
    check: Callable[[dict[str, Any], dict[str, Any]], bool]
    source_text: str

    def __call__(self, arguments: dict[str, Any], globals_dict: dict[str, Any]) -> bool:
        return self.check(arguments, globals_dict)

    def failure(self, arguments: dict[str, Any], globals_dict: dict[str, Any]) -> str:
        """The first failing guard's reason, in user terms."""
        for guard in self.guards:
            reason = guard.failure(arguments, globals_dict)
            if reason is not None:
                return reason
        return "no guard failed"

    def __str__(self) -> str:
        return self.source_text


def build_check(guards: list[Guard]) -> GuardCheck:
    """One function checking every guard, in order (type guards come before reads of items).

    Each source is read once, into a local, the first time a guard needs it, and its prefix
    is shared: the guards on a model's 300 parameters walk `self.layer1[0].conv1` once, not
    once per guard (a walk through `nn.Module.__getattr__` costs about a microsecond a step).
    """
    namespace: dict[str, Any] = {"sys": sys}
    lines: list[str] = []
    names: dict[Source, str] = {}

    def read(source: Source) -> str:
        try:
            known = names.get(source)
        except TypeError:  # an unhashable index: read it whole
            return source.expr()
        if known is not None:
            return known
        base: Source | None = getattr(source, "base", None)
        expression = source.expr_on(read(base) if base is not None else "")
        name = f"__s{len(names)}"
        lines.append(f"        {name} = {expression}")
        names[source] = name
        return name

    for guard in guards:
        condition = guard.expr(namespace, read)
        lines.append(f"        if not {condition}:")
        lines.append("            return False")
    text = "\n".join(
        [
            "def check(L, G):",
            "    try:",
            *lines,
            "        return True",
            "    except Exception:",
            "        return False",
            "",
        ]
    )
    exec(compile(text, "<ember guards>", "exec"), namespace)  # noqa: S102
    return GuardCheck(list(guards), namespace["check"], text)
