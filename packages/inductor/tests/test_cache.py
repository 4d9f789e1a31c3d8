"""Compiled graphs are cached through ember-runtime: a second compile reuses them, a damaged
entry is rebuilt, and a process killed mid-compile leaves the next run correct."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch

import ember.prims as prims
from ember.inductor.pipeline import compile_graph
from ember.runtime import ArtifactCache

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # vector libm is within 4 ulp of torch's


def fn(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x * 3 - 1).sum(1)


def _entries(cache: ArtifactCache) -> list[Path]:
    return [p for p in cache.directory.rglob("*") if p.is_file() and not p.name.endswith(".tmp")]


def test_second_compile_hits_and_damaged_entries_are_rebuilt(tmp_path: Path) -> None:
    x = torch.randn(4, 7)
    graph = prims.trace(fn, x)
    cache = ArtifactCache(tmp_path)
    torch.testing.assert_close(compile_graph(graph, (x,), cache=cache)(x), fn(x), **TOLERANCE)
    assert cache.stats.writes == 3  # the compiled graph, its shared library, the probe answer
    cache.stats.hits = 0
    torch.testing.assert_close(compile_graph(graph, (x,), cache=cache)(x), fn(x), **TOLERANCE)
    assert cache.stats.hits >= 1
    for entry in _entries(cache):  # flip a byte in every entry
        data = bytearray(entry.read_bytes())
        data[len(data) // 2] ^= 0xFF
        entry.write_bytes(bytes(data))
    fresh = ArtifactCache(tmp_path)
    torch.testing.assert_close(compile_graph(graph, (x,), cache=fresh)(x), fn(x), **TOLERANCE)
    assert fresh.stats.corrupt >= 1


def test_a_graph_traced_again_hits_though_its_provenance_differs(tmp_path: Path) -> None:
    """Capture stamps each Graph with its trace time: the key leaves it out (it made every
    compile of a captured Graph miss)."""
    x = torch.randn(4, 7)
    cache = ArtifactCache(tmp_path)
    first, second = prims.trace(fn, x), prims.trace(fn, x)
    first.meta = {"pass": "capture", "time_ms": "12.5"}
    second.meta = {"pass": "capture", "time_ms": "14.0"}
    compile_graph(first, (x,), cache=cache)
    written = cache.stats.writes
    torch.testing.assert_close(compile_graph(second, (x,), cache=cache)(x), fn(x), **TOLERANCE)
    assert cache.stats.writes == written  # the compiled graph was found, not generated again


def test_killed_compile_leaves_the_next_run_correct(tmp_path: Path) -> None:
    slow_compiler = tmp_path / "slow-g++"
    slow_compiler.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "slow g++ 1.0"; exit 0; fi\n'
        'case "$*" in *probe*) exit 1;; esac\n'  # the vector-math probe: answer at once
        'out=; prev=; for arg; do [ "$prev" = -o ] && out="$arg"; prev="$arg"; done\n'
        'echo partial > "$out"\n'  # a half-written output, as a killed compiler leaves
        "touch " + str(tmp_path / "started") + "\n"
        "sleep 60\n"
    )
    slow_compiler.chmod(0o755)
    script = textwrap.dedent(
        f"""
        import torch, ember.prims as prims
        from ember.inductor.pipeline import compile_graph
        from ember.runtime import ArtifactCache
        def fn(x):
            return torch.sigmoid(x * 3 - 1).sum(1)
        x = torch.randn(4, 7)
        compile_graph(prims.trace(fn, x), (x,), cache=ArtifactCache({str(tmp_path)!r}))
        """
    )
    env = {**os.environ, "CXX": str(slow_compiler)}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    child.kill()
    child.wait()
    x = torch.randn(4, 7)
    cache = ArtifactCache(tmp_path)
    torch.testing.assert_close(
        compile_graph(prims.trace(fn, x), (x,), cache=cache)(x), fn(x), **TOLERANCE
    )
