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
    """One function checking every guard, in order (type guards come before reads of items)."""
    namespace: dict[str, Any] = {"sys": sys}
    # Each expression uses private walrus names; each guard gets its own renamed copy.
    parts = [
        guard.expr(namespace).replace("__t", f"__t{i}").replace("__v", f"__v{i}")
        for i, guard in enumerate(guards)
    ]
    body = " and\n            ".join(parts) if parts else "True"
    text = (
        "def check(L, G):\n"
        "    try:\n"
        f"        return bool({body})\n"
        "    except Exception:\n"
        "        return False\n"
    )
    exec(compile(text, "<ember guards>", "exec"), namespace)  # noqa: S102
    return GuardCheck(list(guards), namespace["check"], text)
