"""The ember-runtime exception family.

Every error says what went wrong and what the user can do about it. Cache damage is not an
error: a corrupt entry is discarded and reported as a miss, and the artifact is rebuilt.
"""

from __future__ import annotations


class EmberRuntimeError(Exception):
    """Base class of every error raised by ember-runtime."""


class CacheKeyError(EmberRuntimeError, ValueError):
    """A cache key, or a value given to build one, is malformed."""


class CorruptEntryError(EmberRuntimeError):
    """An on-disk cache entry fails its header, length or checksum check (handled internally)."""
