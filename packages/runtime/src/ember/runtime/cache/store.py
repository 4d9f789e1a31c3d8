"""`ArtifactCache`: compiled artifacts on disk, shared safely between processes.

Entries live at `<root>/artifacts/v<format>/<key[:2]>/<key>`. A write goes to a temporary
file in the same directory and is renamed over the entry (`os.replace`), so readers see the
old entry or the new one, never a mix, however many processes write. A read checks the
entry's header and checksum; a damaged entry is deleted and reported as a miss, never raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ember.prims.config import load
from ember.runtime.cache import entry
from ember.runtime.cache.key import artifact_key, check_key
from ember.runtime.config import RuntimeConfig
from ember.runtime.errors import CorruptEntryError

logger = logging.getLogger("ember.runtime")

_TEMP_SUFFIX = ".tmp"


@dataclass
class CacheStats:
    """What this process's `ArtifactCache` did since it was made or reset."""

    hits: int = 0
    misses: int = 0
    corrupt: int = 0  # damaged entries found, deleted and counted as misses
    writes: int = 0
    write_errors: int = 0  # puts that could not be stored (disk full, read-only, ...)


def default_cache_root() -> Path:
    """`EMBER_CACHE_DIR` if set, else `~/.cache/ember`."""
    configured = load(RuntimeConfig).cache_dir
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "ember"


class ArtifactCache:
    """A directory of compiled artifacts keyed by `ArtifactCache.key(...)`.

    `reset()` forgets this process's counters; `clear()` deletes every entry on disk.
    """

    key = staticmethod(artifact_key)

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(directory).expanduser() if directory is not None else default_cache_root()
        self.directory = self.root / "artifacts" / f"v{entry.FORMAT_VERSION}"
        self.stats = CacheStats()

    def path(self, key: str) -> Path:
        """Where the entry for `key` lives."""
        check_key(key)
        return self.directory / key[:2] / key

    def get(self, key: str) -> bytes | None:
        """The artifact stored under `key`, or None (absent, unreadable or damaged)."""
        path = self.path(key)
        try:
            with open(path, "rb") as file:
                identity = _identity(os.fstat(file.fileno()))
                blob = file.read()
        except FileNotFoundError:
            self.stats.misses += 1
            return None
        except OSError as error:
            logger.warning("cannot read cache entry %s (%s); treating it as a miss", path, error)
            self.stats.misses += 1
            return None
        try:
            payload = entry.decode(key, blob)
        except CorruptEntryError as error:
            self._discard(path, identity, str(error))
            self.stats.corrupt += 1
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        return payload

    def put(self, key: str, data: bytes) -> bool:
        """Store `data` under `key` atomically; False (and a warning) if it could not be stored."""
        path = self.path(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"cache entries hold bytes, got {type(data).__name__}")
        blob = entry.encode(key, bytes(data))
        temporary: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(
                prefix=f".{key[:16]}.", suffix=_TEMP_SUFFIX, dir=path.parent
            )
            with os.fdopen(descriptor, "wb") as file:
                file.write(blob)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except OSError as error:
            if temporary is not None:
                _unlink_quietly(Path(temporary))
            logger.warning("cannot write cache entry %s (%s); continuing without it", path, error)
            self.stats.write_errors += 1
            return False
        self.stats.writes += 1
        return True

    def clear(self) -> None:
        """Delete every entry (and any temporary file a killed writer left) from disk."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def reset(self) -> None:
        """Forget this process's counters; the entries on disk stay."""
        self.stats = CacheStats()

    def __repr__(self) -> str:
        return f"ArtifactCache({str(self.root)!r})"

    # ---- damage ---------------------------------------------------------------------------

    def _discard(self, path: Path, identity: tuple[int, ...], reason: str) -> None:
        logger.warning("discarding damaged cache entry %s: %s; it will be rebuilt", path, reason)
        try:
            # Delete only the file we read: a writer may have replaced it with a good one since.
            if _identity(os.stat(path)) == identity:
                path.unlink()
        except OSError:
            pass  # gone already, or not ours to delete: a miss either way


def _identity(status: os.stat_result) -> tuple[int, ...]:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
