"""Generated Triton kernel modules: written into the ember cache and imported from there.

`load_triton_module(source, cache)` writes the source to `<root>/triton/<sha256>.py` (through
a temporary file and `os.replace`, so a reader never sees half a file) and imports it; the file
stays, so a compile worker in another process imports the very same module. Triton's own
compile cache lives beside it, in `<root>/triton/cache/`, unless `TRITON_CACHE_DIR` is set.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

from ember.prims import write_atomically
from ember.runtime.cache.store import ArtifactCache
from ember.runtime.errors import TritonUnavailableError
from ember.runtime.triton.variant import import_source_file, module_name

_loaded: dict[str, ModuleType] = {}
_lock = threading.Lock()


def load_triton_module(source: str, cache: ArtifactCache) -> ModuleType:
    """The module of `source` (Python with @triton.jit kernels), imported from its cached file."""
    require_triton()
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    path = _materialize(cache.root / "triton", digest, source)
    with _lock:
        module = _loaded.get(str(path))
        if module is None:
            module = import_source_file(path)
            _loaded[str(path)] = module
    return module


def require_triton() -> None:
    """Raise `TritonUnavailableError` (saying what to install) when triton is missing."""
    try:
        import triton  # noqa: F401
    except ImportError as error:
        raise TritonUnavailableError(
            "Triton kernels need triton, which is not installed: pip install 'ember-runtime[gpu]' "
            "(or pip install triton)"
        ) from error


def source_digest(module: ModuleType) -> str:
    """The sha256 of a loaded kernel module's source (its file name, for our modules)."""
    path = Path(str(module.__file__))
    if module.__name__ == module_name(path) and len(path.stem) == 64:
        return path.stem
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reimport(module: ModuleType, suffix: str) -> ModuleType:
    """A fresh import of `module`'s file under another name (e.g. under the Triton interpreter)."""
    path = str(module.__file__)
    name = f"{module.__name__}_{suffix}"
    with _lock:
        fresh = sys.modules.get(name)
        if fresh is None or fresh.__file__ != path:
            fresh = import_source_file(path, name)
    return fresh


def triton_cache_dir(cache: ArtifactCache) -> str | None:
    """Where Triton caches compiled kernels: `<root>/triton/cache`, or None when the user set
    `TRITON_CACHE_DIR` (then Triton's own choice stands)."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return None
    return str(cache.root / "triton" / "cache")


def _materialize(directory: Path, digest: str, source: str) -> Path:
    path = directory / f"{digest}.py"
    payload = source.encode("utf-8")
    with contextlib.suppress(OSError):
        if path.read_bytes() == payload:
            return path
    return write_atomically(path, payload)
