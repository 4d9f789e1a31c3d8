"""Cached cubins (`codegen/triton/cubins.py`): a module's kernels compiled for sm_90 (no GPU
needed) are kept with an index; reading it back gives a `CubinKernel` per kernel with the
signature, block and launch data of Triton's compile, and a missing or damaged piece makes
the whole module load with Triton instead. Launching needs a GPU (benchmarks/export_warm_start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
    loaded = cached_cubin_kernels(cache, key, lambda name, launch: made.append(name))
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
    report["after_damage"] = cached_cubin_kernels(cache, key, lambda name, launch: None)
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
