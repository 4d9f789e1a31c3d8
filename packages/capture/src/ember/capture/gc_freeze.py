"""While a capture and its compile run, garbage collections skip the objects that were
there before.

A capture allocates a great deal (bytecode steps, Variables, Graphs, their serialized forms
for the cache keys), so the interpreter runs full collections during it, and a full
collection walks every object of the process: torch, transformers and the model, 360,000
objects in the GPT-2 benchmark. In a warm start of a 12-layer GPT-2 training step on the
CPU they took 0.27-0.32 s of a 1.7 s first step. `old_objects_frozen()` moves the objects that exist when
the capture starts to the permanent generation (`gc.freeze()`), which collections skip, and
back into the oldest generation when it ends (`gc.unfreeze()`): collections during the
capture still free its own cyclic garbage, and an older cycle that became garbage meanwhile
is freed by the next full collection after it. A process that froze objects itself (a
server before forking workers) is left as it is.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_active = 0  # captures running now (threads capture different functions at once)
_froze = False  # whether the first of them froze, so the last one thaws


@contextmanager
def old_objects_frozen() -> Iterator[None]:
    """Freeze the process's objects for the block (nested and concurrent blocks share one
    freeze); nothing happens when the collector is off or something else froze objects."""
    global _active, _froze
    with _lock:
        if _active == 0:
            _froze = gc.isenabled() and gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _froze:
                gc.unfreeze()
                _froze = False
