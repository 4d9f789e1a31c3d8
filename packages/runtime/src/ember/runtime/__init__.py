"""ember-runtime: loads and runs compiled artifacts.

It holds the on-disk compiled-artifact cache (`ArtifactCache`), shared safely between
processes, and `load_shared_library` (compiled kernels kept in that cache, opened with
ctypes); kernel launch and CUDA graph trees come next (see the package README).
"""

from ember.runtime.cache.key import artifact_key
from ember.runtime.cache.store import ArtifactCache, CacheStats, default_cache_root
from ember.runtime.config import RuntimeConfig
from ember.runtime.errors import CacheKeyError, CorruptEntryError, EmberRuntimeError
from ember.runtime.loader.shared_library import load_shared_library

__all__ = [
    "ArtifactCache",
    "CacheKeyError",
    "CacheStats",
    "CorruptEntryError",
    "EmberRuntimeError",
    "RuntimeConfig",
    "artifact_key",
    "default_cache_root",
    "load_shared_library",
]
