"""Building the native wrapper's interpreter: background builds, remembered failures."""

from __future__ import annotations

import threading
import types
from pathlib import Path

import pytest

from ember.runtime.native import build
from ember.runtime.native.build import NativeBuildError


def test_a_background_build_answers_none_until_it_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    module = types.ModuleType("stand_in")
    builds: list[Path] = []

    def slow_build(directory: Path) -> types.ModuleType:
        builds.append(directory)
        release.wait(10)
        return module

    monkeypatch.setattr(build, "_load_or_build", slow_build)
    assert build.interpreter_if_ready(tmp_path) is None  # started
    assert build.interpreter_if_ready(tmp_path) is None  # still building: not started again
    release.set()
    for _ in range(200):
        if build.interpreter_if_ready(tmp_path) is module:
            break
        threading.Event().wait(0.05)
    assert build.interpreter_if_ready(tmp_path) is module
    assert builds == [tmp_path / "native" / build._key()]


def test_a_failed_build_is_remembered_and_names_the_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "COMPILER", "no-such-compiler-ember")
    with pytest.raises(NativeBuildError, match=r"no C\+\+ compiler.*no-such-compiler-ember"):
        build.interpreter(tmp_path)

    def again(directory: Path) -> None:
        raise AssertionError("a failed build is tried again")

    monkeypatch.setattr(build, "_load_or_build", again)  # remembered: not tried again
    with pytest.raises(NativeBuildError, match="no-such-compiler-ember"):
        build.interpreter_if_ready(tmp_path)
