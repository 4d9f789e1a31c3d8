"""Shared libraries from the artifact cache, loaded with ctypes (no pybind, no import).

The library's bytes live in an `ArtifactCache` entry (checked on every read). To open them,
ctypes needs a file: the bytes are written under `<root>/libraries/` with a name holding
their sha256, through a temporary file renamed into place, and a file whose content does not
match its name (a killed writer, a damaged disk) is replaced before it is opened.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import threading
from collections.abc import Callable
from pathlib import Path

from ember.prims import write_atomically
from ember.runtime.cache.store import ArtifactCache

_loaded: dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()


def load_shared_library(cache: ArtifactCache, key: str, build: Callable[[], bytes]) -> ctypes.CDLL:
    """The library stored under `key`, built with `build()` (and stored) on a miss."""
    with _lock:
        library = _loaded.get(key)
        if library is not None:
            return library
    payload = cache.get(key)
    if payload is None:
        payload = build()
        cache.put(key, payload)
    path = _materialize(cache.root / "libraries", payload)
    library = ctypes.CDLL(str(path))
    with _lock:
        _loaded[key] = library
    return library


def _materialize(directory: Path, payload: bytes) -> Path:
    digest = hashlib.sha256(payload).hexdigest()
    path = directory / f"{digest}.so"
    with contextlib.suppress(OSError):
        if hashlib.sha256(path.read_bytes()).hexdigest() == digest:
            return path
    return write_atomically(path, payload)
