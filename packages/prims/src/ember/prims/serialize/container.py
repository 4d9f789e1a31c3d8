"""The container: magic bytes, format version, the JSON document and the constants blob.

magic      8 bytes  b"\\x89EMBER\\r\\n"
major      u16 LE   readers reject any major version but their own
minor      u16 LE   readers accept any minor; newer minors only add fields
json_len   u64 LE, then json_len bytes of UTF-8 JSON (writers pad it with spaces
           so that the blob starts at a multiple of 64 bytes)
blob_len   u64 LE, then blob_len bytes of constant data; nothing may follow
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from ember.prims.errors import GraphFormatError

MAGIC = b"\x89EMBER\r\n"
FORMAT_VERSION = (1, 0)  # (major, minor); see "Versioning" in docs/graph-format.md
_HEADER = struct.Struct("<8sHHQ")
_LENGTH = struct.Struct("<Q")
_BLOB_ALIGNMENT = 64


@dataclass(frozen=True)
class Framed:
    """The parts of a container."""

    major: int
    minor: int
    document: bytes
    blob: memoryview


def frame(document: Any, blob: bytes) -> bytes:
    """The container bytes of a JSON-able document and a blob."""
    text = json.dumps(document, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    encoded = text.encode("ascii")
    padding = -(_HEADER.size + len(encoded) + _LENGTH.size) % _BLOB_ALIGNMENT
    encoded += b" " * padding
    major, minor = FORMAT_VERSION
    return b"".join(
        (
            _HEADER.pack(MAGIC, major, minor, len(encoded)),
            encoded,
            _LENGTH.pack(len(blob)),
            blob,
        )
    )


def unframe(data: memoryview) -> Framed:
    """Split container bytes; GraphFormatError if the framing or the version is wrong."""
    total = len(data)
    head = bytes(data[: len(MAGIC)])
    if head != MAGIC[: len(head)]:
        raise GraphFormatError(
            "not a serialized ember Graph: the data does not start with the magic bytes "
            f"{MAGIC!r} (got {head!r})"
        )
    if total < _HEADER.size:
        raise GraphFormatError(
            f"truncated header: {total} bytes, the header alone takes {_HEADER.size}"
        )
    _, major, minor, document_length = _HEADER.unpack_from(data, 0)
    if major != FORMAT_VERSION[0]:
        raise GraphFormatError(
            f"unsupported format version {major}.{minor}: this reader reads version "
            f"{FORMAT_VERSION[0]}.x (a different major version is incompatible; use the "
            "ember-prims release that wrote the file, or re-export the graph)"
        )
    position = _HEADER.size
    if document_length > total - position - _LENGTH.size:
        raise GraphFormatError(
            f"truncated: the JSON document claims {document_length} bytes, but only "
            f"{max(total - position - _LENGTH.size, 0)} bytes follow the header "
            "(before the blob length)"
        )
    document = bytes(data[position : position + document_length])
    position += document_length
    (blob_length,) = _LENGTH.unpack_from(data, position)
    position += _LENGTH.size
    if blob_length > total - position:
        raise GraphFormatError(
            f"truncated: the blob claims {blob_length} bytes, but only {total - position} follow"
        )
    if blob_length < total - position:
        raise GraphFormatError(
            f"{total - position - blob_length} unexpected bytes after the blob "
            f"(the data is {total} bytes, the container {position + blob_length})"
        )
    return Framed(major, minor, document, data[position:])


def parse_document(document: bytes) -> Any:
    """The parsed JSON document; GraphFormatError for bad UTF-8, bad JSON or deep nesting."""
    try:
        text = document.decode("utf-8")
    except UnicodeDecodeError as error:
        raise GraphFormatError(
            f"the JSON document is not valid UTF-8 at byte {error.start}: {error.reason}"
        ) from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
    except RecursionError:
        raise GraphFormatError("the JSON document is nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, and integers of too many digits
        raise GraphFormatError(f"the JSON document is invalid: {error}") from None


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    table = dict(pairs)
    if len(table) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"key {key[:100]!r} appears twice in one object")
            seen.add(key)
    return table


def _reject_constant(name: str) -> Any:
    raise ValueError(f'{name} is not JSON; write non-finite floats as {{"$float": ...}}')
