"""Shared libraries from the artifact cache: built once, reused by another process, and
rewritten on disk when the file ctypes would open does not hold the cached bytes."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ember.runtime import ArtifactCache, load_shared_library

SOURCE = 'extern "C" int ember_answer(int x) { return x + 41; }\n'

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _build(tmp_path: Path) -> bytes:
    source, output = tmp_path / "answer.cpp", tmp_path / "answer.so"
    source.write_text(SOURCE)
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(output)], check=True)
    return output.read_bytes()


def test_built_once_then_reused_and_repaired_in_another_process(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    key = cache.key(SOURCE.encode(), config={}, versions={})
    assert load_shared_library(cache, key, lambda: _build(tmp_path)).ember_answer(1) == 42
    for path in (cache.root / "libraries").glob("*.so"):
        path.write_bytes(b"garbage")  # a damaged file must not be opened
    script = textwrap.dedent(
        f"""
        from ember.runtime import ArtifactCache, load_shared_library
        def build():
            raise SystemExit("rebuilt: the cached library was not reused")
        cache = ArtifactCache({str(cache.root)!r})
        print(load_shared_library(cache, {key!r}, build).ember_answer(2))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "43"
