"""The entry format: every kind of damage is detected, never returned as data."""

from __future__ import annotations

import pytest

from ember.runtime import CorruptEntryError, artifact_key
from ember.runtime.cache import entry

KEY = artifact_key(b"graph", {}, {})
OTHER = artifact_key(b"other", {}, {})
PAYLOAD = b"compiled kernel bytes \x00\xff" * 100


def test_round_trip() -> None:
    assert entry.decode(KEY, entry.encode(KEY, PAYLOAD)) == PAYLOAD
    assert entry.decode(KEY, entry.encode(KEY, b"")) == b""


def _damaged() -> dict[str, bytes]:
    blob = entry.encode(KEY, PAYLOAD)
    flipped = bytearray(blob)
    flipped[-7] ^= 0x40
    return {
        "empty": b"",
        "truncated header": blob[:10],
        "truncated payload": blob[:-1],
        "padded": blob + b"\x00",
        "flipped bit": bytes(flipped),
        "garbage": b"not an artifact at all" * 10,
        "another key": entry.encode(OTHER, PAYLOAD),
        "future format": blob[:8] + b"\x00\x09" + blob[10:],
    }


@pytest.mark.parametrize("damage", sorted(_damaged()))
def test_damage_is_detected(damage: str) -> None:
    with pytest.raises(CorruptEntryError):
        entry.decode(KEY, _damaged()[damage])
