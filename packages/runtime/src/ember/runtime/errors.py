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


class KernelSignatureError(EmberRuntimeError, TypeError):
    """A Triton kernel's signature, launch configs and parameters do not agree."""


class KernelArgumentError(EmberRuntimeError, ValueError):
    """A kernel launch got arguments it cannot take (wrong count, a non-tensor pointer)."""


class KernelDeviceError(KernelArgumentError):
    """A GPU kernel got a tensor that is not on the GPU."""


class TritonUnavailableError(EmberRuntimeError, ImportError):
    """Triton kernels were asked for but triton is not installed."""


class TritonInterpreterError(EmberRuntimeError, RuntimeError):
    """The Triton interpreter was switched on after triton was imported (too late for triton 3)."""
