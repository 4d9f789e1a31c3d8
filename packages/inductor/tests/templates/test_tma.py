"""The sm90 variants of the GEMM template: which operands a TMA descriptor reads; the launch
of a persistent configuration (its programs walk every tile exactly once); TMA and persistent
kernels under Triton's interpreter against eager (descriptor loads, transposed operands, edge
tiles, the K tail, several tiles per program); the fallback to cuBLAS for operands that are
not 16-byte aligned; and the build for sm_90 without a GPU (TMA loads and wgmma in the PTX)."""

from __future__ import annotations

import dataclasses
import functools
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
from ember.inductor.templates.gemm import Gemm, Operand
from ember.inductor.templates.gemm_choice import GemmChoice
from ember.inductor.templates.tma import tma_operands
from ember.prims.config import load
from ember.runtime import ArtifactCache, LaunchConfig, TritonKernel

pytest.importorskip("triton")


def _config() -> InductorConfig:
    return dataclasses.replace(load(InductorConfig), gemm_templates=True, cache=False)


def _randn(*size: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*size, generator=generator).to(torch.bfloat16)


def _operand(row_stride: int, col_stride: int, offset: int = 0) -> Operand:
    return Operand("buf", offset, 0, row_stride, col_stride, None)  # type: ignore[arg-type]


def _gemm(a: Operand, b: Operand, m: int = 64, n: int = 48, k: int = 32, *, batch: int = 1,
          dtype: torch.dtype = torch.bfloat16) -> Gemm:  # fmt: skip
    return Gemm("aten::mm.default", batch, m, n, k, a, b, None, 1.0, 0.0, dtype, "out", True)


def test_tma_reads_aligned_operands_in_either_order() -> None:
    """Row-major operands and a transposed weight (`[N, K]` read as `[K, N]`) get descriptors
    in their storage order; unaligned strides or offsets, batches, float32 and operands with
    no unit stride do not."""
    plain = tma_operands(_gemm(_operand(32, 1), _operand(48, 1)))
    assert plain is not None
    a, b = plain
    assert (a.shape, a.strides, a.transposed) == ((64, 32), (32, 1), False)
    assert (b.shape, b.strides, b.transposed) == ((32, 48), (48, 1), False)
    weight = tma_operands(_gemm(_operand(1, 64), _operand(1, 32)))  # a.t() @ w.t()
    assert weight is not None
    a, b = weight
    assert (a.shape, a.block, a.transposed) == ((32, 64), ("BLOCK_K", "BLOCK_M"), True)
    assert (b.shape, b.block, b.transposed) == ((48, 32), ("BLOCK_N", "BLOCK_K"), True)
    assert b.load("k", "col") == "b_desc.load([col, k]).T"
    refused = [
        _gemm(_operand(20, 1), _operand(48, 1), k=20),  # 40-byte rows
        _gemm(_operand(32, 1, offset=3), _operand(48, 1)),  # 6-byte offset
        _gemm(_operand(32, 1), _operand(48, 1), batch=2),
        _gemm(_operand(32, 1), _operand(48, 1), dtype=torch.float32),
        _gemm(_operand(64, 2), _operand(48, 1)),  # a strided slice: no unit stride
        _gemm(_operand(16, 1), _operand(48, 1)),  # rows overlap (stride < K)
    ]
    assert all(tma_operands(gemm) is None for gemm in refused)


@pytest.mark.parametrize(
    ("m", "n", "k"),
    [(4096, 4096, 4096), (4096, 768, 3072), (2048, 11008, 4096), (1000, 3000, 1024)],
)
def test_persistent_programs_walk_every_tile_once(m: int, n: int, k: int) -> None:
    """The grid the launcher computes from XBLOCK, and each program's tiles (`pid0 +
    iteration * PROGRAMS` below the tile count), cover every tile exactly once; a persistent
    grid is at most one program per SM."""
    configs = gemm_configs(m, n, k, torch.bfloat16, tma=True)
    assert any(c.persistent for c in configs) and any(c.tma and not c.persistent for c in configs)
    assert not configs[0].tma  # the interpreter and older GPUs run the pointer kernel
    numel = -(-m // GRID_UNIT) * GRID_UNIT * -(-n // GRID_UNIT) * GRID_UNIT
    for config in configs:
        constants: dict[str, Any] = config.as_json(1, m, n, k, numel)["constants"]  # type: ignore[assignment]
        grid = -(-numel // constants["XBLOCK"])
        assert grid == constants["PROGRAMS"]
        tiles = -(-m // config.block_m) * -(-n // config.block_n)
        walked = [
            pid0 + iteration * constants["PROGRAMS"]
            for pid0 in range(grid)
            for iteration in range(constants["ITERATIONS"])
        ]
        walked = [pid for pid in walked if pid < tiles]
        assert sorted(walked) == list(range(tiles)), config
        if config.persistent:
            assert grid <= gemm_config_table.PERSISTENT_PROGRAMS
        else:
            assert constants["ITERATIONS"] == 1


def _linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w, b))


VALUE_CASES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    # a transposed weight (descriptor over [N, K]), bias and GELU; 37 rows: an edge tile
    "linear_bias_gelu": (
        _linear_gelu,
        lambda: (_randn(37, 64), _randn(40, 64, seed=1) / 8, _randn(40, seed=2)),
    ),
    # a transposed first operand, K = 48 with 32-wide K blocks: a zero-filled K tail
    "transposed_a_k_tail": (
        lambda a, b: a.t() @ b + 1,
        lambda: (_randn(48, 40), _randn(48, 24, seed=1)),
    ),
}


def _choice(compiled: Any) -> GemmChoice:
    (choice,) = [
        k for k in compiled.call.__globals__["kernels"].values() if isinstance(k, GemmChoice)
    ]
    return choice


def _compile(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], tmp_path: Path) -> Any:
    graph = prims.trace(fn, *inputs)
    cache = ArtifactCache(tmp_path)
    return compile_graph(graph, inputs, config=_config(), backend=TritonBackend(), cache=cache)


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("name", sorted(VALUE_CASES))
def test_tma_kernels_match_eager(
    name: str, persistent: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The template's TMA body, one tile per program or persistent (4 programs walking 3x3
    or 3x2 tiles of 16x16), run by Triton's interpreter: eager's values."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(gemm_config_table, "TMA_MIN_OUTPUT", 0)  # small shapes get TMA too
    monkeypatch.setattr(gemm_config_table, "TMA_MIN_K", 0)
    monkeypatch.setattr(gemm_config_table, "PERSISTENT_PROGRAMS", 4)
    fn, make_inputs = VALUE_CASES[name]
    inputs = make_inputs()
    compiled = _compile(fn, inputs, tmp_path)
    choice = _choice(compiled)
    assert choice.tma, "the template has TMA configurations"
    m, n = (37, 40) if name == "linear_bias_gelu" else (40, 24)
    numel = -(-m // GRID_UNIT) * GRID_UNIT * -(-n // GRID_UNIT) * GRID_UNIT
    config = GemmConfig(16, 16, 32, 4, 2, tma=True, persistent=persistent)
    data = config.as_json(1, m, n, 64, numel)
    constants: dict[str, int] = data["constants"]  # type: ignore[assignment]
    if persistent:
        tiles = -(-m // 16) * -(-n // 16)
        assert constants["PROGRAMS"] == 4 and constants["ITERATIONS"] == -(-tiles // 4) > 1
    template = choice.template
    kernel = TritonKernel(
        template.module,
        template.name,
        signature=dict(template.signature),
        configs=[
            LaunchConfig(
                tuple((key, 1 if key == "UPCAST" else value) for key, value in constants.items()),
                num_warps=config.num_warps,
                num_stages=config.num_stages,
            )
        ],
        grid_block="XBLOCK",
    )
    choice.launch = lambda numel, *args: kernel(numel, *choice.template_arguments(args))
    expected = fn(*[t.float() for t in inputs]).to(torch.bfloat16)
    torch.testing.assert_close(compiled(*inputs), expected, rtol=2e-2, atol=2e-2)


def test_unaligned_operands_take_the_vendor_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A template with TMA configurations runs only on 16-byte aligned operands: a call
    with an operand that is not (a view one element in) runs cuBLAS instead."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(gemm_config_table, "TMA_MIN_OUTPUT", 0)
    monkeypatch.setattr(gemm_config_table, "TMA_MIN_K", 0)
    fn, make_inputs = VALUE_CASES["linear_bias_gelu"]
    inputs = make_inputs()
    compiled = _compile(fn, inputs, tmp_path)
    choice = _choice(compiled)
    seen: list[tuple[int, tuple[Any, ...]]] = []
    choice.launch = functools.partial(_record, seen)
    compiled(*inputs)
    (numel, args), = seen  # fmt: skip
    ran: list[str] = []
    choice.vendor = lambda numel, *args: ran.append("vendor")  # type: ignore[assignment]
    choice.template = lambda numel, *args: ran.append("template")  # type: ignore[assignment]
    monkeypatch.setattr("ember.inductor.templates.gemm_choice._set_allocator", lambda a: None)
    choice.run_template(numel, *args)
    shifted = list(args)
    position = choice.tma[0]
    original = args[position]
    shifted[position] = torch.empty(original.numel() + 8, dtype=original.dtype)[1:]
    choice.run_template(numel, *shifted)
    assert ran == ["template", "vendor"]


def _record(seen: list[tuple[int, tuple[Any, ...]]], numel: int, *args: Any) -> None:
    seen.append((numel, args))


_BUILD = """
import json, sys
import torch
import torch.nn.functional as F
import ember.prims as prims
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import generate
from ember.prims.config import load
from ember.runtime import ArtifactCache
from triton.backends.compiler import GPUTarget
import dataclasses

config = dataclasses.replace(load(InductorConfig), gemm_templates=True, cache=False)
x = torch.randn(2048, 1024, dtype=torch.bfloat16)
w = torch.randn(4096, 1024, dtype=torch.bfloat16)
b = torch.randn(4096, dtype=torch.bfloat16)
fn = lambda x, w, b: F.gelu(F.linear(x, w, b))
backend = TritonBackend()
artifact = generate(prims.trace(fn, x, w, b), backend, config, torch.device("cuda"))
kernels = backend.load(artifact["module"], ArtifactCache(sys.argv[1]))
(choice,) = [k for k in kernels.values() if hasattr(k, "template")]
target = GPUTarget("cuda", 90, 32)
report = []
for launch in choice.template.configs:
    constants = dict(launch.constants)
    if constants["TMA"]:
        ptx = choice.template.compile(launch, aligned=True, target=target).asm["ptx"]
        report.append({"iterations": constants["ITERATIONS"], "ptx": ptx})
print(json.dumps(report))
"""


def test_tma_configurations_build_for_sm90(tmp_path: Path) -> None:
    """The TMA configurations (128x128 tiles one a program, 128x256 tiles persistent) of a
    linear layer with bias and GELU build for an H100 here: operand blocks come by TMA
    (`cp.async.bulk.tensor`) into wgmma."""
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
    # 128x128 tiles one a program; 128x256 persistent (256 tiles over 132 programs: two each)
    assert sorted(entry["iterations"] for entry in report) == [1, 2]
    for entry in report:
        ptx = entry["ptx"]
        assert ".target sm_90" in ptx
        assert "cp.async.bulk.tensor" in ptx and "wgmma" in ptx
