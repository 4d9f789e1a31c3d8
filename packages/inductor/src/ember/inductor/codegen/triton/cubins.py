"""Cached cubins: a warm start that launches a graph's kernels without Triton.

After a graph's kernels compile on a GPU, `store_cubins` keeps each kernel's aligned cubin
(content-addressed) and an index of the module's kernels (launch data from Triton's
metadata, the `KERNELS` entry) in ember-runtime's cache, keyed by the module source, the GPU
architecture, the autotuning settings and Triton's version. A later process finding the
index (`cached_cubin_kernels`; on by default, `EMBER_INDUCTOR_CACHED_CUBINS=0` turns it off)
makes a `CubinKernel` of each and loads it on the current device: no `import triton`, no
Triton cache lookups, no launcher modules. A cubin the driver refuses makes the whole module
load with Triton; a launch with an unaligned pointer (or on a device that refuses the cubin)
builds the kernel's `TritonKernel` then (its fallback). `LOADS` counts how each module loaded.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from ember.runtime import ArtifactCache

logger = logging.getLogger("ember.inductor")

# index entries hold only kernels launched plainly: no autotuning, no GEMM templates
_FORMAT = 1


@dataclass
class CubinLoads:
    """How the GPU modules of this process loaded: from cached cubins or with Triton, and why
    not from cubins (`EMBER_LOGS=inductor` logs each module; benchmarks read `LOADS`)."""

    cubins: int = 0  # modules whose kernels all launch from cached cubins
    kernels: int = 0  # kernels of those modules
    triton: int = 0  # modules loaded with Triton
    reasons: Counter[str] = field(default_factory=Counter)  # why, per Triton-loaded module

    def record(self, cubins: int | None, reason: str = "") -> None:
        """One module loaded: from `cubins` kernels, or (None) with Triton because `reason`."""
        if cubins is None:
            self.triton += 1
            self.reasons[reason] += 1
            logger.info("GPU module loaded with Triton: %s", reason)
        else:
            self.cubins += 1
            self.kernels += cubins
            logger.info("GPU module loaded from %d cached cubins", cubins)

    def as_dict(self) -> dict[str, Any]:
        return {"cubins": self.cubins, "kernels": self.kernels, "triton": self.triton,
                "reasons": dict(self.reasons)}  # fmt: skip

    def reset(self) -> None:
        self.cubins = self.kernels = self.triton = 0
        self.reasons.clear()


LOADS = CubinLoads()


def index_key(module: str, arch: int, autotune: Mapping[str, bool]) -> str | None:
    """The cache key of a module's cubin index on `sm_<arch>`; None without triton metadata."""
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None
    config = {"cubins": _FORMAT, "arch": arch, **{k: bool(v) for k, v in autotune.items()}}
    return ArtifactCache.key(module.encode(), config=config, versions={"triton": triton})


def store_cubins(
    cache: ArtifactCache,
    key: str,
    kernels: Mapping[str, Any],
    launches: Mapping[str, Any],
    target: Any,
) -> bool:
    """Keep the aligned cubin of each kernel compiled for `target` and the index; False (and
    nothing stored) when a kernel is not a plainly launched TritonKernel."""
    from ember.runtime import TritonKernel

    index: dict[str, Any] = {}
    for name, kernel in kernels.items():
        if not isinstance(kernel, TritonKernel) or kernel.autotune or name not in launches:
            return False
        config = kernel.configs[0]
        compiled = kernel.compile(config, aligned=True, target=target)  # kept by the kernel
        metadata_ = compiled.metadata
        if getattr(metadata_, "profile_scratch_size", 0):
            return False
        cubin: bytes = compiled.asm["cubin"]
        cubin_key = ArtifactCache.key(cubin, config={}, versions={})
        if not cache.put(cubin_key, cubin):
            return False
        index[name] = {
            "launch": launches[name],
            "block": int(dict(config.constants)[kernel.grid_block]),
            "cubin": cubin_key,
            "function": metadata_.name,
            "num_warps": int(metadata_.num_warps),
            "shared": int(metadata_.shared),
            "global_scratch_size": int(getattr(metadata_, "global_scratch_size", 0) or 0),
            "global_scratch_align": int(getattr(metadata_, "global_scratch_align", 1) or 1),
        }
    return cache.put(key, json.dumps({"format": _FORMAT, "kernels": index}).encode())


def cached_cubin_kernels(
    cache: ArtifactCache,
    key: str,
    fallback: Callable[[str, Mapping[str, Any]], Callable[..., None]],
    device: int | None = None,
) -> tuple[dict[str, Any] | None, str]:
    """A `CubinKernel` for every kernel of the index under `key`, each loaded on `device`
    when given, and ""; or None and why not, when any piece is missing, damaged or refused
    by the driver (the caller then loads the kernels with Triton). `fallback(name, launch)`
    makes a Triton launch for calls with unaligned pointers."""
    from ember.runtime.cubin import CubinKernel, CubinVariant
    from ember.runtime.cubin.driver import KernelLaunchError

    payload = cache.get(key)
    if payload is None:
        return None, "no cubin index yet (a first compile)"
    try:
        index = json.loads(payload)
        if index.get("format") != _FORMAT:
            return None, "a cubin index of another format"
        kernels: dict[str, Any] = {}
        for name, entry in index["kernels"].items():
            cubin = cache.get(entry["cubin"])
            if cubin is None:
                return None, "a cubin missing or damaged"
            variant = CubinVariant(
                cubin=cubin,
                function=str(entry["function"]),
                num_warps=int(entry["num_warps"]),
                shared=int(entry["shared"]),
                global_scratch_size=int(entry["global_scratch_size"]),
                global_scratch_align=int(entry["global_scratch_align"]),
            )
            launch = entry["launch"]
            signature = [(str(p), str(t)) for p, t in launch["signature"].items()]
            kernels[name] = CubinKernel(
                name,
                signature,
                int(entry["block"]),
                variant,
                fallback=_bind(fallback, name, launch),
            )
    except (KeyError, TypeError, ValueError) as error:
        return None, f"a damaged cubin index ({type(error).__name__})"
    if device is not None:
        for kernel in kernels.values():
            try:
                kernel.load(device)
            except KernelLaunchError as error:
                return None, f"the driver refused a cubin ({error})"
    return kernels, ""


def _bind(
    fallback: Callable[[str, Mapping[str, Any]], Callable[..., None]],
    name: str,
    launch: Mapping[str, Any],
) -> Callable[[], Callable[..., None]]:
    return lambda: fallback(name, launch)
