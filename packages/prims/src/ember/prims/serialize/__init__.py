"""Serialization of Graphs: `dumps`/`loads` (bytes) and `save`/`load` (files).

The format (docs/graph-format.md) is a small binary container around a JSON document and a
blob of constant tensor data. Loading is pickle-free: it never imports or evaluates anything,
and any malformed input raises GraphFormatError naming what is wrong and where.
"""

from __future__ import annotations

import os
from pathlib import Path

from ember.prims.atomic_file import write_atomically
from ember.prims.errors import GraphFormatError, GraphVerificationError
from ember.prims.graph import Graph
from ember.prims.serialize.container import FORMAT_VERSION, MAGIC, frame, parse_document, unframe
from ember.prims.serialize.decode import decode_document
from ember.prims.serialize.encode import encode_document

__all__ = ["FORMAT_VERSION", "MAGIC", "dump_document", "dumps", "load", "loads", "save"]

# The safety net's words: a message carrying them means a decoder bug, never bad input.
INTERNAL_ERROR = "internal error"


def dumps(graph: Graph) -> bytes:
    """The serialized bytes of `graph`; GraphFormatError if it holds what the format cannot."""
    document, blob = encode_document(graph)
    return frame(document, blob)


def dump_document(graph: Graph) -> dict[str, object]:
    """The JSON document `dumps` writes for `graph` (without the blob), as plain data."""
    return encode_document(graph)[0]


def loads(data: bytes | bytearray | memoryview) -> Graph:
    """The Graph serialized in `data`; GraphFormatError (only) if the data is malformed."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise GraphFormatError(f"expected bytes, got {type(data).__name__}")
    try:
        view = memoryview(data)
        if not view.c_contiguous:
            view = memoryview(view.tobytes())
        graph = _decode(view.cast("B"))
    except GraphFormatError:
        raise
    except Exception as error:  # the safety net: a decoder bug must still read as a format error
        raise GraphFormatError(
            f"{INTERNAL_ERROR} while loading a graph ({type(error).__name__}: {error}); "
            "please report this with the file"
        ) from error
    return graph


def _decode(data: memoryview) -> Graph:
    framed = unframe(data)
    document = parse_document(framed.document)
    graph = decode_document(document, framed.blob, lenient=framed.minor > FORMAT_VERSION[1])
    _verify(graph)
    return graph


def _verify(graph: Graph) -> None:
    try:
        from ember.prims.verify import verify
    except ImportError:  # the verifier ships in the same package; tolerate a partial install
        return
    try:
        verify(graph)
    except GraphVerificationError as error:
        raise GraphFormatError(f"the loaded graph does not verify: {error}") from error


def save(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write `graph` to `path` atomically (a temporary file in the same folder, then rename)."""
    write_atomically(path, dumps(graph))


def load(path: str | os.PathLike[str]) -> Graph:
    """The Graph saved at `path` (OSError if it cannot be read, GraphFormatError if malformed)."""
    return loads(Path(path).read_bytes())
