"""Autocast off while a Graph is re-traced or run.

A captured Graph already holds the casts autocast made while it was captured (and none in
regions where the user turned autocast off). Re-tracing it (decompositions, the joint
forward/backward trace) or running its ops (the interpreter, a compiler's extern calls)
while the caller's autocast is still on would cast again: a float32 region would run in
bfloat16. So every layer does both with autocast off, on every device type.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

DEVICE_TYPES = ("cuda", "cpu")


def autocast_enabled() -> bool:
    """Whether autocast is on for any device type."""
    return any(torch.is_autocast_enabled(device) for device in DEVICE_TYPES)


@contextlib.contextmanager
def autocast_disabled() -> Iterator[None]:
    """Autocast off for every device type (a no-op when it is off already)."""
    if not autocast_enabled():
        yield
        return
    with contextlib.ExitStack() as stack:
        for device in DEVICE_TYPES:
            stack.enter_context(torch.autocast(device_type=device, enabled=False))
        yield
