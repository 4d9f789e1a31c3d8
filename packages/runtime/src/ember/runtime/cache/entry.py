"""The on-disk entry format: a fixed header, then the artifact bytes.

Header: magic `EMBERART`, format version, the entry's key (32 bytes), the payload length and
the payload's sha256. `decode` checks each field, so a truncated, padded, damaged or misplaced
file raises CorruptEntryError instead of returning wrong bytes.
"""

from __future__ import annotations

import hashlib
import struct

from ember.runtime.errors import CorruptEntryError

MAGIC = b"EMBERART"
FORMAT_VERSION = 1
HEADER = struct.Struct(">8sH32sQ32s")  # magic, version, key digest, payload length, sha256


def encode(key: str, payload: bytes) -> bytes:
    """The bytes of an entry holding `payload` under `key` (a 64-hex-digit key)."""
    header = HEADER.pack(
        MAGIC, FORMAT_VERSION, bytes.fromhex(key), len(payload), hashlib.sha256(payload).digest()
    )
    return header + payload


def decode(key: str, blob: bytes) -> bytes:
    """The payload of entry bytes `blob` read for `key`; CorruptEntryError says what is wrong."""
    if len(blob) < HEADER.size:
        raise CorruptEntryError(f"truncated header ({len(blob)} of {HEADER.size} bytes)")
    magic, version, key_digest, length, checksum = HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise CorruptEntryError("not an ember artifact (bad magic)")
    if version != FORMAT_VERSION:
        raise CorruptEntryError(f"entry format {version}, expected {FORMAT_VERSION}")
    if key_digest != bytes.fromhex(key):
        raise CorruptEntryError("the entry belongs to another key")
    payload = blob[HEADER.size :]
    if len(payload) != length:
        raise CorruptEntryError(f"payload is {len(payload)} bytes, header says {length}")
    if hashlib.sha256(payload).digest() != checksum:
        raise CorruptEntryError("payload checksum mismatch")
    return payload
