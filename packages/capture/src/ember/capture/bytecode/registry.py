"""The opcode handler table: one small function per opcode, each declaring the Python
versions it serves, plus deliberate "unsupported" entries that name the construct.

`handler_for(name)` is what the interpreter looks up; `missing_opcodes(version)` lists the
opcodes of a version with neither a handler nor an unsupported entry (a test keeps it empty).
"""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.capture.unsupported import Unsupported

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame

Version = tuple[int, int]
Handler = Callable[["Frame", Any], None]

SUPPORTED_VERSIONS: tuple[Version, ...] = ((3, 11), (3, 12))
CURRENT: Version = (sys.version_info.major, sys.version_info.minor)

_HANDLERS: dict[tuple[str, Version], Handler] = {}
_UNSUPPORTED: dict[tuple[str, Version], tuple[str, str]] = {}


def handler(
    *names: str, versions: tuple[Version, ...] = SUPPORTED_VERSIONS
) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of `names` on `versions`."""

    def register(fn: Handler) -> Handler:
        for name in names:
            for version in versions:
                key = (name, version)
                if key in _HANDLERS:
                    raise AssertionError(f"two handlers for {name} on {version}")
                _HANDLERS[key] = fn
        return fn

    return register


def unsupported(
    names: tuple[str, ...] | list[str],
    construct: str,
    versions: tuple[Version, ...] = SUPPORTED_VERSIONS,
    kind: str = "unsupported-instruction",
) -> None:
    """Declare that `names` are deliberately not modelled: meeting them raises Unsupported
    (a graph break) of catalogue entry `kind`."""
    for name in names:
        for version in versions:
            _UNSUPPORTED[(name, version)] = (construct, kind)


def handler_for(name: str, version: Version = CURRENT) -> Handler:
    """The handler of opcode `name`; unsupported and unknown opcodes raise Unsupported."""
    found = _HANDLERS.get((name, version))
    if found is not None:
        return found
    construct, kind = _UNSUPPORTED.get(
        (name, version), (f"the bytecode instruction {name}", "unsupported-instruction")
    )

    def refuse(frame: Frame, instr: Any) -> None:
        raise Unsupported.of(kind, construct=construct)

    return refuse


def missing_opcodes(version: Version = CURRENT) -> list[str]:
    """Opcodes of the running interpreter with neither a handler nor an unsupported entry."""
    names = set(dis.opmap) | {"LOAD_METHOD", "LOAD_CLOSURE"}
    return sorted(
        name
        for name in names
        if (name, version) not in _HANDLERS and (name, version) not in _UNSUPPORTED
    )


def table(version: Version = CURRENT) -> dict[str, str]:
    """opcode -> handler name or "unsupported: construct", for docs and debugging."""
    rows = {
        name: f"unsupported: {why}" for (name, v), (why, _) in _UNSUPPORTED.items() if v == version
    }
    rows.update({name: fn.__name__ for (name, v), fn in _HANDLERS.items() if v == version})
    return dict(sorted(rows.items()))
