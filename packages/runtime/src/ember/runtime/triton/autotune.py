"""Autotuning: time each `LaunchConfig` of a kernel once, keep the fastest, remember it on disk.

The choice is stored in the `ArtifactCache` under a key made of the kernel module's source hash,
the kernel name, the sizes (numel and the size arguments) and the device name, so another
process reuses it without benchmarking. The benchmark function is an argument (`Bench`): CUDA
events by default, a fake in tests. Timings go to the `autotune` log topic (`EMBER_LOGS`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ember.prims.logs import topic_logger
from ember.runtime.cache.store import ArtifactCache
from ember.runtime.triton.config import LaunchConfig

logger = topic_logger("autotune")

Bench = Callable[[Callable[[], None]], float]  # runs a launch closure, returns milliseconds

FORMAT = 1


@dataclass(frozen=True)
class AutotuneKey:
    """What an autotuning choice depends on."""

    source: str  # sha256 of the kernel module's source
    kernel: str
    sizes: tuple[int, ...]  # numel, then the size arguments in signature order
    device: str  # e.g. "NVIDIA H100 80GB HBM3"

    def cache_key(self, cache: ArtifactCache) -> str:
        return cache.key(
            b"ember.runtime.triton.autotune",
            config={
                "source": self.source,
                "kernel": self.kernel,
                "sizes": list(self.sizes),
                "device": self.device,
            },
            versions={"ember.runtime.triton.autotune": str(FORMAT)},
        )


def cuda_bench(launch: Callable[[], None], *, warmup: int = 3, repeats: int = 15) -> float:
    """Median milliseconds of one `launch()` on the current CUDA stream (CUDA events).

    Each sample times ten launches back to back, so microsecond kernels are measured above the
    events' resolution.
    """
    import torch

    inner = 10
    for _ in range(warmup):
        launch()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            launch()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / inner)
    return statistics.median(samples)


class Autotuner:
    """Chooses a config per `AutotuneKey`: from the cache, else by benchmarking each config."""

    def __init__(self, cache: ArtifactCache | None, bench: Bench | None = None) -> None:
        self.cache = cache
        self.bench: Bench = bench if bench is not None else cuda_bench
        self.benchmarked = 0  # configs timed by this autotuner (0 when every choice was cached)

    def choose(
        self,
        key: AutotuneKey,
        configs: Sequence[LaunchConfig],
        launch_for: Callable[[LaunchConfig], Callable[[], None]],
    ) -> LaunchConfig:
        """The fastest of `configs`; `launch_for(config)` compiles one and returns a launch."""
        stored = self.lookup(key, configs)
        if stored is not None:
            logger.debug("%s %s: cached choice %s", key.kernel, key.sizes, stored.describe())
            return stored
        timings: list[float] = []
        first_error: BaseException | None = None
        for config in configs:
            try:
                timings.append(self.bench(launch_for(config)))
            except Exception as error:  # a config that does not fit (registers, shared memory)
                logger.info("%s: config %s failed: %s", key.kernel, config.describe(), error)
                first_error = first_error or error
                timings.append(math.inf)
            self.benchmarked += 1
        best = min(range(len(configs)), key=timings.__getitem__)
        if math.isinf(timings[best]):
            assert first_error is not None
            raise first_error
        chosen = configs[best]
        logger.info(
            "%s sizes=%s on %s: %s -> %s",
            key.kernel,
            key.sizes,
            key.device,
            "; ".join(f"{c.describe()}: {t:.4f} ms" for c, t in zip(configs, timings)),
            chosen.describe(),
        )
        self.store(key, chosen, timings)
        return chosen

    def lookup(self, key: AutotuneKey, configs: Sequence[LaunchConfig]) -> LaunchConfig | None:
        """The stored choice for `key` if it is still one of `configs`."""
        if self.cache is None:
            return None
        payload = self.cache.get(key.cache_key(self.cache))
        if payload is None:
            return None
        try:
            stored = _decode(json.loads(payload.decode("utf-8"))["config"])
        except (ValueError, KeyError, TypeError):
            return None
        return stored if stored in configs else None

    def store(self, key: AutotuneKey, chosen: LaunchConfig, timings: Sequence[float]) -> None:
        if self.cache is None:
            return
        record = {
            "config": _encode(chosen),
            "timings_ms": [t if math.isfinite(t) else None for t in timings],
        }
        self.cache.put(key.cache_key(self.cache), json.dumps(record, sort_keys=True).encode())


def _encode(config: LaunchConfig) -> dict[str, object]:
    return {
        "constants": [list(pair) for pair in config.constants],
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
    }


def _decode(data: dict[str, object]) -> LaunchConfig:
    constants = data["constants"]
    if not isinstance(constants, list):
        raise TypeError("constants")
    return LaunchConfig(
        constants=tuple((str(name), int(value)) for name, value in constants),
        num_warps=int(str(data["num_warps"])),
        num_stages=int(str(data["num_stages"])),
    )
