"""`write_atomically`: a file appears whole or not at all (temporary file, fsync, rename), so
a killed writer or a concurrent reader never leaves or sees half a file. Saved Graphs and
ember-runtime's caches (shared libraries, Triton modules) are written this way."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: str | os.PathLike[str], payload: bytes) -> Path:
    """Write `payload` to `path` through a temporary file in its folder and a rename. The file
    keeps the mode of the one it replaces (0o644 for a new one; mkstemp's would be private)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.stem[:16]}.", suffix=".tmp"
    )
    try:
        os.chmod(temporary, target.stat().st_mode & 0o7777 if target.exists() else 0o644)
        with os.fdopen(handle, "wb") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return target
