"""Cached cubins (`codegen/triton/cubins.py`): a module's kernels compiled for sm_90 (no GPU
needed) are kept with an index; reading it back gives a `CubinKernel` per kernel with the
signature, block and launch data of Triton's compile, and a missing or damaged piece makes
the whole module load with Triton instead, as does a cubin the driver refuses (a fake
driver); `LOADS` counts both ways. Launching needs a GPU (benchmarks/cubins_check.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.inductor.codegen.triton import backend as backend_module
from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.codegen.triton.cubins import LOADS, cached_cubin_kernels
from ember.runtime import ArtifactCache
from ember.runtime.cubin import driver as cuda
from ember.runtime.cubin.driver import KernelLaunchError

CHECK = textwrap.dedent(
    """
    import json, sys, torch
    import ember.prims as prims
    from triton.backends.compiler import GPUTarget
    from ember.inductor.codegen.triton import TritonBackend
    from ember.inductor.codegen.triton.backend import _launches
    from ember.inductor.codegen.triton.cubins import cached_cubin_kernels, index_key, store_cubins
    from ember.inductor.config import InductorConfig
    from ember.inductor.pipeline import generate
    from ember.runtime import ArtifactCache

    cache = ArtifactCache(sys.argv[1])
    backend = TritonBackend()
    traced = prims.trace(lambda x, y: ((x * 2 + y).sum(1), (x - y).relu()), torch.randn(8, 33), torch.randn(8, 33))
    module = generate(traced, backend, InductorConfig(), torch.device("cuda"))["module"]
    kernels = backend._load(module, cache)
    launches = _launches(module)
    assert sorted(launches) == sorted(kernels), (launches, kernels)
    key = index_key(module, 90, {"max_autotune": False, "autotune_reductions": False})
    assert store_cubins(cache, key, kernels, launches, GPUTarget("cuda", 90, 32))
    made = []
    loaded, why = cached_cubin_kernels(cache, key, lambda name, launch: made.append(name))
    assert why == "", why
    report = {
        name: {"params": list(k.params), "block": k.block, "warps": k.variants[True].num_warps,
               "elf": k.variants[True].cubin[:4] == b"\\x7fELF", "unaligned": k.variants[False]}
        for name, k in loaded.items()
    }
    report = {"kernels": report, "expected_blocks": {
        n: [c["constants"]["XBLOCK"] for c in l["configs"]][0] for n, l in launches.items()}}
    index = json.loads(cache.get(key))
    first = next(iter(index["kernels"].values()))["cubin"]
    cache.path(first).write_bytes(b"damaged")
    report["after_damage"] = cached_cubin_kernels(cache, key, lambda name, launch: None)[0]
    print("REPORT " + json.dumps(report))
    """
)


def test_cubins_round_trip_through_the_cache(tmp_path: Path) -> None:
    environment = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", CHECK, str(tmp_path)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("REPORT ", 1)[1])
    kernels = report["kernels"]
    assert kernels  # (the two results fuse into one kernel)
    for name, kernel in kernels.items():
        assert kernel["elf"] and kernel["warps"] >= 1
        assert kernel["block"] == report["expected_blocks"][name]
        assert kernel["params"] and kernel["unaligned"] is None  # unaligned: Triton, on demand
    assert report["after_damage"] is None


INDEX = "1" * 64
MISSING = "2" * 64


def _index(cache: ArtifactCache, key: str) -> None:
    """A one-kernel index as `store_cubins` writes it, with a stand-in cubin."""
    cubin = b"\x7fELF stand-in"
    cubin_key = ArtifactCache.key(cubin, config={}, versions={})
    cache.put(cubin_key, cubin)
    launch = {"signature": {"in_ptr0": "*fp32", "xnumel": "i32"}, "configs": [], "mutated": []}
    entry = {"launch": launch, "block": 128, "cubin": cubin_key, "function": "k", "num_warps": 4,
             "shared": 0, "global_scratch_size": 0, "global_scratch_align": 1}  # fmt: skip
    cache.put(key, json.dumps({"format": 1, "kernels": {"k": entry}}).encode())


def _fake_loader(monkeypatch: pytest.MonkeyPatch, refuse: bool) -> list[int]:
    loaded: list[int] = []

    def load_function(cubin: bytes, name: str, shared: int, device: int) -> int:
        if refuse:
            raise KernelLaunchError("loading the cubin of k failed: CUDA_ERROR_NO_BINARY_FOR_GPU")
        loaded.append(device)
        return 1

    monkeypatch.setattr(cuda, "load_function", load_function)
    return loaded


@pytest.mark.parametrize("refuse", [False, True])
def test_index_read_loads_each_cubin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refuse: bool
) -> None:
    cache = ArtifactCache(tmp_path)
    _index(cache, INDEX)
    loaded = _fake_loader(monkeypatch, refuse)
    kernels, why = cached_cubin_kernels(cache, INDEX, lambda name, launch: print, device=0)
    if refuse:
        assert kernels is None and "NO_BINARY_FOR_GPU" in why
    else:
        assert kernels is not None and sorted(kernels) == ["k"] and why == "" and loaded == [0]
    assert cached_cubin_kernels(cache, MISSING, lambda name, launch: print)[0] is None


@pytest.mark.parametrize("refuse", [False, True])
def test_backend_load_falls_back_to_triton_and_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refuse: bool
) -> None:
    cache = ArtifactCache(tmp_path)
    _index(cache, INDEX)
    _fake_loader(monkeypatch, refuse)
    triton_kernels = {"k": object()}
    monkeypatch.setattr(TritonBackend, "_cubin_key", lambda self, module: INDEX)
    monkeypatch.setattr(TritonBackend, "_load", lambda self, module, cache: triton_kernels)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(backend_module, "store_cubins", lambda *args: True)
    monkeypatch.setattr("ember.runtime.cuda_target", lambda: None)
    LOADS.reset()
    got: Any = TritonBackend().load("module", cache)
    if refuse:
        assert got is triton_kernels
        assert LOADS.as_dict()["triton"] == 1 and LOADS.cubins == 0
        assert "refused" in next(iter(LOADS.reasons))
    else:
        assert type(got["k"]).__name__ == "CubinKernel"
        assert LOADS.as_dict() == {"cubins": 1, "kernels": 1, "triton": 0, "reasons": {}}
    LOADS.reset()
    assert TritonBackend(cached_cubins=False).load("module", cache) is triton_kernels
    assert LOADS.reasons == {"EMBER_INDUCTOR_CACHED_CUBINS=0": 1}
    LOADS.reset()
