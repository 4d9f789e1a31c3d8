"""Side effects seen while capturing, replayed in order after the graph runs.

Attribute writes (`self.count = ...`, an nn.Module buffer assigned a new tensor), global
writes (`global STEP; STEP = ...`), mutations of lists and dicts that came from outside
the function, and calls made only for their effect outside the program (`logger.warning`). Reads after a write see the written Variable; the generated entry function
performs the writes for real (attribute writes go through `setattr`, so an nn.Module sees a
buffer update as one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ember.capture.variables.base import Variable


@dataclass
class AttributeWrite:
    """`owner.name = value`."""

    owner: Variable
    name: str
    value: Variable


@dataclass
class GlobalWrite:
    """`G[name] = value` in the module dict `table`."""

    table: dict[str, Any]
    name: str
    value: Variable


@dataclass
class MethodCall:
    """`owner.name(*args, **kwargs)` whose result is unused (a log message), replayed."""

    owner: Variable
    name: str
    args: list[Variable]
    kwargs: dict[str, Variable]


def call_method(owner: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """What the entry function calls to replay a MethodCall."""
    getattr(owner, name)(*args, **kwargs)


@dataclass
class SideEffects:
    """The writes of one capture, in program order, and the containers it may mutate."""

    writes: list[AttributeWrite | GlobalWrite | MethodCall] = field(default_factory=list)
    # Lists and dicts read from a source; those whose `mutated` flag is set are replayed.
    containers: list[Variable] = field(default_factory=list)
    # ContextVars set or read in the capture, by id: their ContextState (context_vars.py).
    context_vars: dict[int, Any] = field(default_factory=dict)
    _attributes: dict[tuple[int, str], Variable] = field(default_factory=dict)
    _globals: dict[tuple[int, str], Variable] = field(default_factory=dict)

    def store_attr(self, owner: Variable, identity: object, name: str, value: Variable) -> None:
        self.writes.append(AttributeWrite(owner, name, value))
        self._attributes[(id(identity), name)] = value

    def load_attr(self, identity: object, name: str) -> Variable | None:
        return self._attributes.get((id(identity), name))

    def record_call(
        self, owner: Variable, name: str, args: list[Variable], kwargs: dict[str, Variable]
    ) -> None:
        self.writes.append(MethodCall(owner, name, args, kwargs))

    def store_global(self, table: dict[str, Any], name: str, value: Variable) -> None:
        self.writes.append(GlobalWrite(table, name, value))
        self._globals[(id(table), name)] = value

    def load_global(self, table: dict[str, Any], name: str) -> Variable | None:
        return self._globals.get((id(table), name))

    def mutated_containers(self) -> list[Variable]:
        return [c for c in self.containers if getattr(c, "mutated", False)]

    def __bool__(self) -> bool:
        return bool(self.writes or self.mutated_containers())
