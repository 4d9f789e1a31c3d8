"""ember-runtime: loads and runs compiled artifacts.

Today it holds the on-disk compiled-artifact cache (`ArtifactCache`), shared safely between
processes; artifact loading, kernel launch and CUDA graph trees come next (see the package
README).
"""

from ember.runtime.cache.key import artifact_key
from ember.runtime.cache.store import ArtifactCache, CacheStats, default_cache_root
from ember.runtime.config import RuntimeConfig
from ember.runtime.errors import CacheKeyError, CorruptEntryError, EmberRuntimeError

__all__ = [
    "ArtifactCache",
    "CacheKeyError",
    "CacheStats",
    "CorruptEntryError",
    "EmberRuntimeError",
    "RuntimeConfig",
    "artifact_key",
    "default_cache_root",
]
