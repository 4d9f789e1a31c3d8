"""Cache keys: a sha256 over a canonical encoding of what a compiled artifact depends on.

The serialized Graph, the config values that enter the key and the package versions are
framed with their lengths and encoded as canonical JSON (sorted keys, no whitespace, no NaN),
so equal inputs give equal keys in every process and on every machine.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from ember.runtime.errors import CacheKeyError

KEY_PATTERN = re.compile(r"^[0-9a-f]{64}$")
_DOMAIN = b"ember-artifact-key\x00v1\x00"


def artifact_key(graph_bytes: bytes, config: Mapping[str, Any], versions: Mapping[str, str]) -> str:
    """The hex sha256 key of an artifact built from `graph_bytes` under `config` and `versions`.

    `config` and `versions` hold JSON values only (None, bool, int, float, str, lists, tuples
    and dicts with string keys); anything else raises CacheKeyError, because its text form
    would not be stable across processes.
    """
    if not isinstance(graph_bytes, (bytes, bytearray, memoryview)):
        raise CacheKeyError(
            f"graph_bytes must be bytes (dumps(graph)), got {type(graph_bytes).__name__}"
        )
    digest = hashlib.sha256(_DOMAIN)
    for part in (
        bytes(graph_bytes),
        canonical_json(config, "config"),
        canonical_json(versions, "versions"),
    ):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def canonical_json(value: Any, where: str) -> bytes:
    """`value` as canonical JSON bytes; `where` names it in errors (`config`)."""
    _check_json(value, where)
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )
    return text.encode("ascii")


def check_key(key: object) -> str:
    """`key` if it is a key `artifact_key` can produce; CacheKeyError otherwise."""
    if not isinstance(key, str) or not KEY_PATTERN.match(key):
        raise CacheKeyError(
            f"{key!r} is not an artifact cache key (64 lowercase hex digits); build keys with "
            "ArtifactCache.key(graph_bytes, config, versions)"
        )
    return key


def _check_json(value: Any, where: str) -> None:
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise CacheKeyError(f"{where} is {value}, which has no canonical JSON form")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CacheKeyError(f"{where} has the key {key!r}; cache key dicts need str keys")
            _check_json(item, f"{where}[{key!r}]")
        return
    raise CacheKeyError(
        f"{where} is a {type(value).__name__}; cache key values must be None, bool, int, "
        "float, str, or lists and dicts of them (convert it to one of these first)"
    )
