"""Cache keys: stable across processes, sensitive to every input, strict about value types."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import torch

from ember.runtime import ArtifactCache, CacheKeyError, artifact_key

CONFIG = {"EMBER_MAX_FUSION": 64, "cpp": {"flags": ["-O3", "-march=native"], "simd": True}}
VERSIONS = {"ember-inductor": "0.1.0", "torch": torch.__version__}


def test_key_is_hex_sha256_and_deterministic() -> None:
    key = artifact_key(b"graph", CONFIG, VERSIONS)
    assert len(key) == 64 and int(key, 16) >= 0
    reordered = {"cpp": {"simd": True, "flags": ["-O3", "-march=native"]}, "EMBER_MAX_FUSION": 64}
    assert artifact_key(b"graph", reordered, dict(reversed(VERSIONS.items()))) == key
    assert ArtifactCache.key(b"graph", CONFIG, VERSIONS) == key


@pytest.mark.parametrize(
    "changed",
    [
        (b"graph2", CONFIG, VERSIONS),
        (b"graph", {**CONFIG, "EMBER_MAX_FUSION": 65}, VERSIONS),
        (b"graph", {**CONFIG, "EMBER_MAX_FUSION": 64.0}, VERSIONS),
        (b"graph", CONFIG, {**VERSIONS, "torch": "0.0"}),
        (b"graph", {}, {**CONFIG, **VERSIONS}),  # the same entries in another section
    ],
)
def test_every_input_changes_the_key(changed: tuple[bytes, dict[str, Any], dict[str, Any]]) -> None:
    assert artifact_key(*changed) != artifact_key(b"graph", CONFIG, VERSIONS)


def test_framing_keeps_sections_apart() -> None:
    # Without length framing, moving bytes between the graph and the config could collide.
    assert artifact_key(b'graph{"a":1}', {}, {}) != artifact_key(b"graph", {"a": 1}, {})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"x": {1, 2}}, r"config\['x'\] is a set"),
        ({1: "a"}, "str keys"),
        ({"x": float("nan")}, "no canonical JSON"),
        ({"x": [torch.float32]}, r"config\['x'\]\[0\] is a dtype"),
    ],
)
def test_values_without_a_stable_text_form_are_rejected(
    config: dict[Any, Any], message: str
) -> None:
    with pytest.raises(CacheKeyError, match=message):
        artifact_key(b"graph", config, {})


def test_another_process_computes_the_same_key() -> None:
    graph_bytes = bytes(range(256)) * 4
    key = artifact_key(graph_bytes, CONFIG, VERSIONS)
    code = (
        "import sys, json; from ember.runtime import artifact_key; "
        "print(artifact_key(sys.stdin.buffer.read(), *json.loads(sys.argv[1])))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "PYTHONHASHSEED": "12345",
    }
    child = subprocess.run(
        [sys.executable, "-c", code, json.dumps([CONFIG, VERSIONS])],
        input=graph_bytes,
        capture_output=True,
        env=env,
        check=True,
        timeout=120,
    )
    assert child.stdout.decode().strip() == key
