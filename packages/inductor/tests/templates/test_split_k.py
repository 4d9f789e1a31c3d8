"""Split-K configurations of the GEMM template: which products get them and their launch
(every tile's chunks, each chunk's K range); their kernels under Triton's interpreter against
eager (a K tail inside the last chunk, a chunk reaching past K, batches, a fused epilogue), the
same values on a second call (the last program resets its tile's counter) and the build for
sm_90 without a GPU (the arrival atomic and tensor-core instructions in the PTX)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph
from ember.inductor.templates import configs as gemm_config_table
from ember.inductor.templates.configs import GRID_UNIT, GemmConfig, gemm_configs
from ember.inductor.templates.gemm_choice import GemmChoice
from ember.prims.config import load
from ember.runtime import ArtifactCache, LaunchConfig, TritonKernel

pytest.importorskip("triton")


def test_split_k_goes_to_short_grids_with_a_long_k() -> None:
    """512x512x16384 (16 tiles of 128x128) splits K in 8; 1024x1024x8192 (64 tiles) in 2;
    a product that fills the GPU (2048x2048x2048) or has a short K (512^3: 8 blocks of K) in
    2 at most, and none at 4096^3."""

    def splits(m: int, n: int, k: int) -> list[int]:
        found = gemm_configs(m, n, k, torch.bfloat16, split=True)
        return [c.split_k for c in found if c.split_k > 1]

    assert splits(512, 512, 16384) == [8]
    assert splits(1024, 1024, 8192) == [2]
    assert splits(512, 512, 512) == [2]
    assert splits(4096, 4096, 4096) == []
    assert splits(2048, 2048, 2048) == []


@pytest.mark.parametrize(("m", "n", "k", "split"), [(512, 512, 16384, 8), (37, 40, 80, 4)])
def test_split_launch_covers_every_chunk_of_every_tile(m: int, n: int, k: int, split: int) -> None:
    """The grid holds SPLIT_K programs a tile; the chunks (K_CHUNK from pid_k * K_CHUNK)
    cover K once (37x40x80 in 4: chunks of 32, the fourth wholly past K, reading nothing)."""
    config = GemmConfig(16 if m < 128 else 128, 16 if n < 128 else 128, 32, 4, 2, split_k=split)
    numel = -(-m // GRID_UNIT) * GRID_UNIT * -(-n // GRID_UNIT) * GRID_UNIT
    constants: dict[str, Any] = config.as_json(1, m, n, k, numel)["constants"]  # type: ignore[assignment]
    tiles = -(-m // config.block_m) * -(-n // config.block_n)
    grid = -(-numel // constants["XBLOCK"])
    programs = {(pid0 // split, pid0 % split) for pid0 in range(grid) if pid0 // split < tiles}
    assert programs == {(tile, chunk) for tile in range(tiles) for chunk in range(split)}
    chunk = constants["K_CHUNK"]
    assert chunk % config.block_k == 0
    covered = [kk for p in range(split) for kk in range(p * chunk, (p + 1) * chunk) if kk < k]
    assert covered == list(range(k))


def _randn(*size: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*size, generator=torch.Generator().manual_seed(seed)).to(dtype)


CASES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]], int]] = {
    # K = 256 in 3 chunks of 96: the third reads 64 and masks 32 past K
    "linear_bias_gelu": (
        lambda x, w, b: F.gelu(F.linear(x, w, b)),
        lambda: (_randn(37, 256), _randn(40, 256, seed=1) / 16, _randn(40, seed=2)),
        3,
    ),
    # K = 200 in 4 chunks of 64: a tail of 8 in the fourth; 3 batches
    "bmm_residual_bfloat16": (
        lambda a, b, r: torch.bmm(a, b) + r,
        lambda: tuple(
            _randn(*size, seed=i, dtype=torch.bfloat16)
            for i, size in enumerate([(3, 20, 200), (3, 200, 24), (3, 20, 24)])
        ),
        4,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_split_k_kernels_match_eager_twice(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A split-K kernel (16x16 tiles) under the interpreter: eager's values, and the same
    again on a second call through the same buffers (counters back at zero)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(gemm_config_table, "SPLIT_TILE_AREA", 0)  # small tiles split too
    monkeypatch.setattr(gemm_config_table, "SPLIT_MIN_K_BLOCKS", 1)
    fn, make_inputs, split = CASES[name]
    inputs = make_inputs()
    config = dataclasses.replace(load(InductorConfig), gemm_templates=True, cache=False)
    graph = prims.trace(fn, *inputs)
    compiled = compile_graph(
        graph, inputs, config=config, backend=TritonBackend(), cache=ArtifactCache(tmp_path)
    )
    (choice,) = [
        k for k in compiled.call.__globals__["kernels"].values() if isinstance(k, GemmChoice)
    ]
    assert choice.split is not None, "the template has split-K configurations"
    batch = inputs[0].shape[0] if inputs[0].dim() == 3 else 1
    m, k = inputs[0].shape[-2:]
    n = inputs[1].shape[0] if name == "linear_bias_gelu" else inputs[1].shape[-1]
    numel = batch * -(-m // GRID_UNIT) * GRID_UNIT * -(-n // GRID_UNIT) * GRID_UNIT
    launch = GemmConfig(16, 16, 32, 4, 2, split_k=split)
    constants: dict[str, int] = launch.as_json(batch, m, n, k, numel)["constants"]  # type: ignore[assignment]
    template = choice.template
    kernel = TritonKernel(
        template.module,
        template.name,
        signature=dict(template.signature),
        configs=[
            LaunchConfig(
                tuple((key, 1 if key == "UPCAST" else value) for key, value in constants.items()),
                num_warps=4,
                num_stages=2,
            )
        ],
        grid_block="XBLOCK",
    )
    choice.launch = lambda numel, *args: kernel(numel, *choice.template_arguments(args))
    dtype = inputs[0].dtype
    expected = fn(*[t.float() for t in inputs]).to(dtype)
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    first = compiled(*inputs)
    torch.testing.assert_close(first, expected, **tolerance)  # type: ignore[arg-type]
    assert not choice.template_arguments(())[-1].any(), "every tile's counter is back at 0"
    torch.testing.assert_close(compiled(*inputs), first, rtol=0, atol=0)


_BUILD = """
import dataclasses, json, sys
import torch
import ember.prims as prims
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import generate
from ember.prims.config import load
from ember.runtime import ArtifactCache
from triton.backends.compiler import GPUTarget

config = dataclasses.replace(load(InductorConfig), gemm_templates=True, cache=False)
a = torch.randn(512, 16384, dtype=torch.bfloat16)
b = torch.randn(16384, 512, dtype=torch.bfloat16)
backend = TritonBackend()
artifact = generate(prims.trace(lambda a, b: a @ b, a, b), backend, config, torch.device("cuda"))
kernels = backend.load(artifact["module"], ArtifactCache(sys.argv[1]))
(choice,) = [k for k in kernels.values() if hasattr(k, "template")]
target = GPUTarget("cuda", 90, 32)
report = []
for launch in choice.template.configs:
    if dict(launch.constants)["SPLIT_K"] > 1:
        ptx = choice.template.compile(launch, aligned=True, target=target).asm["ptx"]
        report.append({"split": dict(launch.constants)["SPLIT_K"], "ptx": ptx})
print(json.dumps(report))
"""


def test_split_k_builds_for_sm90(tmp_path: Path) -> None:
    """512x512x16384's split-K configuration builds for an H100 here: its arrival is one
    acquire-release atomic add on the global counter, its K chunks run on the tensor cores."""
    environment = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", _BUILD, str(tmp_path)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert [entry["split"] for entry in report] == [8]
    ptx = report[0]["ptx"]
    assert ".target sm_90" in ptx and "wgmma.mma" in ptx
    assert "atom.global.gpu.acq_rel.add" in ptx
