"""Compile a list of guards into one fast check, and explain the first failing guard.

The check is one generated Python function `check(L, G)` whose body is the conjunction of
every guard's expression; any exception while reading a source counts as a miss. Its twin
`check_inputs(L, G)` runs the same checks and returns the Graph's inputs it has read on the
way (None on a miss), so a call reads each parameter once, not once for the guards and again
for the Graph.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
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
    # the same checks; on a hit, the values of the `inputs` given to build_check, in order
    check_inputs: Callable[[dict[str, Any], dict[str, Any]], tuple[Any, ...] | None]
    # the values of those inputs, without checks (the call a capture was made from)
    read_inputs: Callable[[dict[str, Any], dict[str, Any]], tuple[Any, ...]]

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


def build_check(guards: list[Guard], inputs: Sequence[Source] = ()) -> GuardCheck:
    """One function checking every guard, in order (type guards come before reads of items).

    Each source is read once, into a local, the first time a guard needs it, and its prefix
    is shared: the guards on a model's 300 parameters walk `self.layer1[0].conv1` once, not
    once per guard (a walk through `nn.Module.__getattr__` costs about a microsecond a step).
    `check_inputs` then reads the `inputs` no guard has read and returns them all.
    """
    namespace: dict[str, Any] = {"sys": sys}
    lines, read = _reader()
    for guard in guards:
        condition = guard.expr(namespace, read)
        lines.append(f"        if not {condition}:")
        lines.append("            return False")
    checks = len(lines)
    values = [read(source) for source in inputs]  # reads no guard made come after the checks
    miss = "            return False"
    read_lines = ["            return None" if line == miss else line for line in lines]
    text = _function("check", lines[:checks], "True", "False")
    texts = [text, _function("check_inputs", read_lines, _tuple(values), "None")]
    plain_lines, plain_read = _reader()
    plain_values = [plain_read(source) for source in inputs]
    texts.append(_function("read_inputs", plain_lines, _tuple(plain_values), None))
    exec(compile("".join(texts), "<ember guards>", "exec"), namespace)  # noqa: S102
    return GuardCheck(
        list(guards),
        namespace["check"],
        text,
        namespace["check_inputs"],
        namespace["read_inputs"],
    )


def _reader() -> tuple[list[str], Callable[[Source], str]]:
    """Lines that read sources into locals, sharing prefixes, and `read(source)`, which adds
    the lines a source needs and returns the expression of its value."""
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

    return lines, read


def _tuple(values: list[str]) -> str:
    return f"({''.join(value + ', ' for value in values)})"


def _function(name: str, lines: list[str], hit: str, miss: str | None) -> str:
    """`def name(L, G)`: the lines, then `return hit`; with `miss`, any exception returns it
    (a guard that cannot read its source fails), without, it propagates."""
    if miss is None:
        return "\n".join(
            [f"def {name}(L, G):", *(line[4:] for line in lines), f"    return {hit}", ""]
        )
    return "\n".join(
        [
            f"def {name}(L, G):",
            "    try:",
            *lines,
            f"        return {hit}",
            "    except Exception:",
            f"        return {miss}",
            "",
        ]
    )
