"""Guards: the conditions under which a captured graph may be reused, and their check."""

from ember.capture.guards.check import GuardCheck, build_check
from ember.capture.guards.kinds import Guard, GuardKind
from ember.capture.guards.source import (
    AttrSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    ModuleEntrySource,
    Source,
)

__all__ = [
    "AttrSource",
    "GlobalSource",
    "Guard",
    "GuardCheck",
    "GuardKind",
    "ItemSource",
    "LocalSource",
    "ModuleEntrySource",
    "Source",
    "build_check",
]
