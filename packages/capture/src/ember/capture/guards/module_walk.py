"""The module walk in C: the reads of a model's submodules, parameters and buffers
(`self._modules['layer1']._parameters['weight']`) and their identity and `training` guards,
done by one call of the C guard module instead of ~4 lines of Python a module.

`plan_walk` picks, from a check's guards, the table reads (`ModuleEntrySource`) under
arguments and globals, the identity guards on them and on those roots, and the `training`
guards of the modules read; the C walk reads in that order, checks as it goes, and returns
the values read, which the generated Python binds to the locals later guards use. It gives
the Python check's answer: the same reads (`getattr` then `[key]`), `is` tests, and any
Exception while reading is a miss. Only the order differs: the walk's checks come before the
other guards, which is the same conjunction (the reads call no code a plain `nn.Module`
overrides).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ember.capture.guards.kinds import Guard, GuardKind
from ember.capture.guards.source import (
    AttrSource,
    GlobalSource,
    LocalSource,
    ModuleEntrySource,
    Source,
)

# (parent slot, table or None, key or None, expected object or None, training 0/1 or -1)
Step = tuple[int, str | None, str | None, Any, int]


@dataclass
class WalkPlan:
    """What the C walk reads and checks. Slots: the roots, then one a read, in order."""

    roots: list[Source] = field(default_factory=list)
    reads: list[Source] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    absorbed: set[int] = field(default_factory=set)  # positions of the guards it checks


def plan_walk(guards: list[Guard]) -> WalkPlan:
    """The walk of `guards`' module-table reads and the guards it checks (none: empty)."""
    plan = WalkPlan()
    slots: dict[Source, tuple[str, int]] = {}  # source -> ("root" | "read", index)
    pending: list[tuple[tuple[str, int], str | None, str | None, Any, int]] = []

    def slot(source: Source) -> tuple[str, int] | None:
        try:
            known = slots.get(source)
        except TypeError:  # an unhashable index on the way
            return None
        if known is not None:
            return known
        if isinstance(source, ModuleEntrySource):
            parent = slot(source.base)
            if parent is None:
                return None
            pending.append((parent, source.table, source.key, None, -1))
            slots[source] = ("read", len(plan.reads))
            plan.reads.append(source)
            return slots[source]
        if isinstance(source, (LocalSource, GlobalSource)):
            slots[source] = ("root", len(plan.roots))
            plan.roots.append(source)
            return slots[source]
        return None

    def deepest_entry(source: Source | None) -> Source | None:
        while source is not None and not isinstance(source, ModuleEntrySource):
            source = getattr(source, "base", None)
        return source

    for position, guard in enumerate(guards):
        source = guard.source
        if guard.kind is GuardKind.ID and isinstance(
            source, (ModuleEntrySource, LocalSource, GlobalSource)
        ):
            at = slot(source)
            if at is not None:
                pending.append((at, None, None, guard.expected, -1))
                plan.absorbed.add(position)
                continue
        if (
            guard.kind is GuardKind.TRAINING
            and isinstance(source, AttrSource)
            and source.attr == "training"
            and type(guard.expected) is bool
            and isinstance(source.base, ModuleEntrySource)
        ):
            at = slot(source.base)
            if at is not None:
                pending.append((at, None, None, None, int(guard.expected)))
                plan.absorbed.add(position)
                continue
        entry = deepest_entry(source)
        if entry is not None:
            slot(entry)  # read in C; the guard itself stays in Python
    if not plan.reads:  # nothing to walk: identity tests of arguments are as fast in Python
        return WalkPlan()
    roots = len(plan.roots)

    def index(at: tuple[str, int]) -> int:
        return at[1] if at[0] == "root" else roots + at[1]

    plan.steps = [(index(at), *rest) for at, *rest in pending]
    return plan


def walk_lines(
    plan: WalkPlan,
    walk: Any,
    read: Callable[[Source], str],
    bind: Callable[[Source], str],
    constant: Callable[[Any], str],
    miss: str,
) -> list[str]:
    """The generated lines that run the walk (`walk`, the C module's walk function for
    `plan`): its roots read by `read`, its reads bound to new locals by `bind`."""
    roots = "".join(f"{read(root)}, " for root in plan.roots)
    lines = [f"        __w = {constant(walk)}(({roots}))", "        if __w is None:", miss]
    names = "".join(f"{bind(source)}, " for source in plan.reads)
    lines.append(f"        {names}= __w")
    return lines
