"""The partition cache: a training Graph's forward and backward halves kept across processes.

`aot` traces the joint forward/backward Graph through torch's autograd and partitions it on
every compile; a second process compiling the same captured Graph gets the same halves. With
a store (any object with `get(key) -> bytes | None` and `put(key, bytes)`, such as
ember-runtime's `ArtifactCache`, which a backend hands in), the halves are kept under a key of
the serialized Graph (its provenance aside), the flags of the inputs that require grad, the
partitioner, the decomposition table (the source files of its functions) and the source of
ember-autodiff and ember-prims. The entry is two serialized Graphs (pickle-free) and a JSON
header; an entry that does not decode is a miss.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import struct
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from ember.autodiff.partition import Partition
from ember.prims import Graph, dumps, loads

_DOMAIN = b"ember-partition\x00v1\x00"
_LENGTH = struct.Struct("<Q")


class PartitionStore(Protocol):
    """Where partitions are kept: keys are 64 lowercase hex digits."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> bool: ...


def partition_key(
    graph: Graph,
    requires_grad: Sequence[bool],
    partitioner: str,
    resident: Collection[int],
    decompositions: Mapping[str, Callable[..., Any]] | None,
) -> str | None:
    """The key of `graph`'s partition, or None for a Graph the format cannot carry."""
    try:
        payload = dumps(dataclasses.replace(graph, meta={}))
    except Exception:  # noqa: BLE001 - compiled, just not cached
        return None
    settings = {
        "requires_grad": [bool(flag) for flag in requires_grad],
        "partitioner": partitioner,
        "resident": sorted(int(i) for i in resident),
        "decompositions": sorted(decompositions or ()),
        "decomposition_sources": _decomposition_sources(decompositions),
        "sources": _source_fingerprint(),
        "torch": torch.__version__,
    }
    digest = hashlib.sha256(_DOMAIN)
    for part in (payload, json.dumps(settings, sort_keys=True).encode()):
        digest.update(_LENGTH.pack(len(part)))
        digest.update(part)
    return digest.hexdigest()


def encode(parts: Partition, differentiable: Sequence[bool]) -> bytes:
    """The entry bytes of a partition."""
    forward, backward = dumps(parts.forward), dumps(parts.backward)
    header = json.dumps(
        {
            "saved": list(parts.saved),
            "saved_bytes": parts.saved_bytes,
            "num_forward_outputs": parts.num_forward_outputs,
            "differentiable": [bool(flag) for flag in differentiable],
            "forward_bytes": len(forward),
        }
    ).encode()
    return _LENGTH.pack(len(header)) + header + forward + backward


def decode(data: bytes) -> tuple[Partition, tuple[bool, ...]] | None:
    """The partition and the differentiable flags in entry bytes, or None if they do not
    decode (a damaged or foreign entry is a miss, never an error)."""
    try:
        (length,) = _LENGTH.unpack_from(data, 0)
        header = json.loads(data[_LENGTH.size : _LENGTH.size + length])
        start = _LENGTH.size + length
        middle = start + int(header["forward_bytes"])
        forward, backward = loads(data[start:middle]), loads(data[middle:])
        parts = Partition(
            forward,
            backward,
            tuple(str(name) for name in header["saved"]),
            int(header["saved_bytes"]),
            int(header["num_forward_outputs"]),
        )
        return parts, tuple(bool(flag) for flag in header["differentiable"])
    except Exception:  # noqa: BLE001 - any damage reads as a miss
        return None


def _decomposition_sources(table: Mapping[str, Callable[..., Any]] | None) -> str:
    """A hash of the source files that define the table's functions (an edit misses)."""
    modules = sorted({getattr(fn, "__module__", "") or "" for fn in (table or {}).values()})
    return _files_digest(tuple(modules))


@functools.cache
def _files_digest(modules: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in modules:
        module = sys.modules.get(name)
        path = inspect.getsourcefile(module) if module is not None else None
        digest.update(name.encode())
        if path:
            digest.update(Path(path).read_bytes())
    return digest.hexdigest()


@functools.cache
def _source_fingerprint() -> str:
    """A hash of ember-autodiff's and ember-prims' own source: tracing and partitioning."""
    import ember.prims

    digest = hashlib.sha256()
    for package in (Path(__file__).parent, Path(ember.prims.__file__).parent):
        for path in sorted(package.rglob("*.py")):
            digest.update(str(path.relative_to(package)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
