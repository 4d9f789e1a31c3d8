"""The autotuner with an injected benchmark: it keeps the fastest config, stores the choice in
the ArtifactCache, and another autotuner (another process) reuses it without benchmarking."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from ember.runtime import ArtifactCache, LaunchConfig
from ember.runtime.triton.autotune import AutotuneKey, Autotuner

CONFIGS = [
    LaunchConfig((("XBLOCK", 64),)),
    LaunchConfig((("XBLOCK", 128),), num_warps=8),
    LaunchConfig((("XBLOCK", 256),), num_warps=8, num_stages=2),
]
KEY = AutotuneKey(source="ab" * 32, kernel="add_kernel", sizes=(1000, 1000), device="Fake GPU")
TIMES = {64: 3.0, 128: 1.0, 256: 2.0}  # milliseconds by XBLOCK


def _fake_launches(launched: list[int]) -> Callable[[LaunchConfig], Callable[[], None]]:
    def launch_for(config: LaunchConfig) -> Callable[[], None]:
        block = config.constant("XBLOCK")
        return lambda: launched.append(block)

    return launch_for


def _timing_bench(launched: list[int]) -> Callable[[Callable[[], None]], float]:
    def bench(launch: Callable[[], None]) -> float:
        launch()
        return TIMES[launched[-1]]

    return bench


def test_fastest_is_chosen_stored_and_reused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    launched: list[int] = []
    tuner = Autotuner(ArtifactCache(tmp_path), _timing_bench(launched))
    with caplog.at_level(logging.INFO, logger="ember.runtime.autotune"):
        assert tuner.choose(KEY, CONFIGS, _fake_launches(launched)) == CONFIGS[1]
    assert launched == [64, 128, 256] and tuner.benchmarked == 3
    assert "XBLOCK=128, warps=8, stages=1: 1.0000 ms" in caplog.text
    assert caplog.text.rstrip().endswith("-> XBLOCK=128, warps=8, stages=1")

    def no_bench(launch: Callable[[], None]) -> float:
        raise AssertionError("a stored choice must not be benchmarked again")

    # A new cache object on the same directory stands for another process.
    again = Autotuner(ArtifactCache(tmp_path), no_bench)
    assert again.choose(KEY, CONFIGS, _fake_launches([])) == CONFIGS[1]
    assert again.benchmarked == 0
    # Other sizes or another device are other choices.
    other = AutotuneKey(KEY.source, KEY.kernel, (2000, 2000), KEY.device)
    assert Autotuner(ArtifactCache(tmp_path), no_bench).lookup(other, CONFIGS) is None


def test_stored_choice_no_longer_offered_is_benchmarked_again(tmp_path: Path) -> None:
    launched: list[int] = []
    Autotuner(ArtifactCache(tmp_path), _timing_bench(launched)).choose(
        KEY, CONFIGS, _fake_launches(launched)
    )
    remaining = [CONFIGS[0], CONFIGS[2]]
    tuner = Autotuner(ArtifactCache(tmp_path), _timing_bench(launched))
    assert tuner.choose(KEY, remaining, _fake_launches(launched)) == CONFIGS[2]
    assert tuner.benchmarked == 2


def test_failing_config_is_skipped(tmp_path: Path) -> None:
    launched: list[int] = []

    def launch_for(config: LaunchConfig) -> Callable[[], None]:
        if config.constant("XBLOCK") == 128:
            raise RuntimeError("out of resources: shared memory")
        return _fake_launches(launched)(config)

    tuner = Autotuner(ArtifactCache(tmp_path), _timing_bench(launched))
    assert tuner.choose(KEY, CONFIGS, launch_for) == CONFIGS[2]
    with pytest.raises(RuntimeError, match="out of resources"):
        Autotuner(None, _timing_bench(launched)).choose(KEY, CONFIGS[1:2], launch_for)


def test_damaged_choice_is_a_miss(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    cache.put(KEY.cache_key(cache), b'{"config": {"constants": "nonsense"}}')
    assert Autotuner(cache).lookup(KEY, CONFIGS) is None
