"""The libmvec probe's answer is kept in the artifact cache: a warm process runs no probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ember.inductor.codegen.cpp import compiler, probe_cache
from ember.runtime import ArtifactCache

# A process that loads one C++ module through the backend and reports every command it ran.
_CHILD = r"""
import ctypes, json, subprocess, sys
commands = []
original = subprocess.run
def run(command, *args, **kwargs):
    commands.append([str(part) for part in command])
    return original(command, *args, **kwargs)
subprocess.run = run
import torch
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.runtime import ArtifactCache
module = 'extern "C" void twice(void* x, int64_t n) { float* p = (float*)x; for (int64_t i = 0; i < n; ++i) p[i] *= 2; }\n'
kernels = CppBackend().load("#include <cstdint>\n" + module, ArtifactCache(sys.argv[1]))
x = torch.arange(4.0)
kernels["twice"](x.data_ptr(), 4)
print(json.dumps({"commands": commands, "x": x.tolist()}))
"""


def _child(cache: Path) -> list[list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(cache)],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["x"] == [0.0, 2.0, 4.0, 6.0]
    commands: list[list[str]] = report["commands"]
    return commands


def _probes(commands: list[list[str]]) -> int:
    return sum(any(part.endswith("probe.cpp") for part in command) for command in commands)


def test_a_warm_process_with_its_kernels_cached_runs_no_probe(tmp_path: Path) -> None:
    cold = _child(tmp_path)
    assert _probes(cold) == 1
    warm = _child(tmp_path)
    assert _probes(warm) == 0
    # the kernel came from the cache too: g++ only answered --version
    assert all(command[1:] == ["--version"] for command in warm), warm


@pytest.fixture
def probe_counter(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts probes; each answers VECTOR_MATH. This process's memory of answers is cleared,
    as in a new process."""
    calls: list[int] = []

    def probe() -> tuple[str, ...]:
        calls.append(1)
        return compiler.VECTOR_MATH

    monkeypatch.setattr(compiler, "vector_math_flags", probe)
    monkeypatch.setattr(probe_cache, "_known", {})
    return calls


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_cache, "_known", {})


def test_the_answer_is_read_back_and_a_new_compiler_version_probes_again(
    tmp_path: Path, probe_counter: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ArtifactCache(tmp_path)
    assert probe_cache.vector_math_flags(cache) == compiler.VECTOR_MATH
    assert probe_cache.vector_math_flags(cache) == compiler.VECTOR_MATH  # this process's memory
    assert len(probe_counter) == 1
    _new_process(monkeypatch)
    assert probe_cache.vector_math_flags(cache) == compiler.VECTOR_MATH
    assert len(probe_counter) == 1  # from disk
    _new_process(monkeypatch)
    monkeypatch.setattr(compiler, "compiler_version", lambda: "g++ (Other) 99.1.0")
    assert probe_cache.vector_math_flags(cache) == compiler.VECTOR_MATH
    assert len(probe_counter) == 2  # another version: probed again


def test_another_compiler_or_damaged_entry_probes_again(
    tmp_path: Path, probe_counter: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ArtifactCache(tmp_path)
    probe_cache.vector_math_flags(cache)
    _new_process(monkeypatch)
    monkeypatch.setattr(compiler, "COMPILER", "clang++")
    monkeypatch.setattr(compiler, "compiler_version", lambda: "clang version 17")
    probe_cache.vector_math_flags(cache)
    assert len(probe_counter) == 2
    _new_process(monkeypatch)
    cache.put(probe_cache._probe_key(), b'{"vector_math": ["-O0"]}')  # not an answer it gives
    probe_cache.vector_math_flags(cache)
    assert len(probe_counter) == 3


def test_a_compiler_without_libmvec_is_remembered_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def probe() -> tuple[str, ...]:
        calls.append(1)
        return ()

    monkeypatch.setattr(compiler, "vector_math_flags", probe)
    monkeypatch.setattr(probe_cache, "_known", {})
    cache = ArtifactCache(tmp_path)
    assert probe_cache.vector_math_flags(cache) == ()
    _new_process(monkeypatch)
    assert probe_cache.vector_math_flags(cache) == ()
    assert calls == [1]
