"""Cached cubins: a warm start that launches a graph's kernels without Triton.

After a graph's kernels compile on a GPU, `store_cubins` keeps each kernel's aligned cubin
(content-addressed) and an index of the module's kernels (launch data from Triton's
metadata, the `KERNELS` entry) in ember-runtime's cache, keyed by the module source, the GPU
architecture, the autotuning settings and Triton's version. A later process finding the
index (`cached_cubin_kernels`, with `EMBER_INDUCTOR_CACHED_CUBINS=1`) makes a `CubinKernel`
of each: no `import triton`, no Triton cache lookups, no launcher modules. A launch with an
unaligned pointer builds the kernel's `TritonKernel` then (its fallback).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

from ember.runtime import ArtifactCache

# index entries hold only kernels launched plainly: no autotuning, no GEMM templates
_FORMAT = 1


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
) -> dict[str, Any] | None:
    """A `CubinKernel` for every kernel of the index under `key`, or None when any piece is
    missing or damaged (the caller then loads the kernels with Triton). `fallback(name,
    launch)` makes a Triton launch for calls with unaligned pointers."""
    from ember.runtime.cubin import CubinKernel, CubinVariant

    payload = cache.get(key)
    if payload is None:
        return None
    try:
        index = json.loads(payload)
        if index.get("format") != _FORMAT:
            return None
        kernels: dict[str, Any] = {}
        for name, entry in index["kernels"].items():
            cubin = cache.get(entry["cubin"])
            if cubin is None:
                return None
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
        return kernels
    except (KeyError, TypeError, ValueError):
        return None


def _bind(
    fallback: Callable[[str, Mapping[str, Any]], Callable[..., None]],
    name: str,
    launch: Mapping[str, Any],
) -> Callable[[], Callable[..., None]]:
    return lambda: fallback(name, launch)
