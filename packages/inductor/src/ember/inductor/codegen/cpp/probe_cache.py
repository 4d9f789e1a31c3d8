"""The C++ compiler probes' answers kept in the artifact cache, so a warm process runs no g++.

`compiler.vector_math_flags()` links a test program against glibc's vector math library
(0.4-0.5 s of g++ every process, kernels cached or not). Its answer depends only on the
compiler, its flags and the C library, so it is kept as an `ArtifactCache` entry under a key
of the probe's source, the flags, the compiler's resolved path and `--version` line, the C
library's version and the machine: another compiler, a compiler upgrade or another glibc
misses and probes again. An entry that does not decode is a miss.
"""

from __future__ import annotations

import json
import os
import platform
import shutil

from ember.inductor.codegen.cpp import compiler
from ember.runtime import ArtifactCache

# The answers this process already has, by cache directory and key.
_known: dict[tuple[str, str], tuple[str, ...]] = {}


def vector_math_flags(cache: ArtifactCache) -> tuple[str, ...]:
    """`compiler.vector_math_flags()`, read from `cache` when an earlier process probed the
    same compiler, and stored there when this process probes."""
    key = _probe_key()
    known = _known.get((str(cache.root), key))
    if known is not None:
        return known
    flags = _decode(cache.get(key))
    if flags is None:
        flags = compiler.vector_math_flags()
        cache.put(key, json.dumps({"vector_math": list(flags)}).encode())
    _known[str(cache.root), key] = flags
    return flags


def _probe_key() -> str:
    return ArtifactCache.key(
        compiler.PROBE_SOURCE.encode(),
        config={"probe": "vector_math", "flags": [*compiler.FLAGS, *compiler.VECTOR_MATH]},
        versions={
            "compiler": compiler.COMPILER,
            "compiler_path": _resolved(compiler.COMPILER),
            "compiler_version": compiler.compiler_version(),
            "libc": _libc_version(),
            "machine": platform.machine(),
        },
    )


def _decode(data: bytes | None) -> tuple[str, ...] | None:
    """The flags in an entry: `VECTOR_MATH` or (), anything else (damage) is a miss."""
    if data is None:
        return None
    try:
        flags = tuple(json.loads(data)["vector_math"])
    except (ValueError, KeyError, TypeError):
        return None
    return flags if flags in (compiler.VECTOR_MATH, ()) else None


def _resolved(command: str) -> str:
    found = shutil.which(command)
    return os.path.realpath(found) if found else command


def _libc_version() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):  # not glibc, or not a POSIX system
        return ""
