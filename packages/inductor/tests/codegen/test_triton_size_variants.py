"""A Triton kernel over symbolic sizes runs a body specialized on their run-time values when
they allow it (aligned sizes, int32 indices, narrower tiles for a short bounded length) and its
general body otherwise (`codegen/triton/size_variants.py`, issue 19: GPT-2's softmax over a
symbolic length took 5-9x the static kernel's GPU time on the H100). Every body must give
eager's values: each length below takes another one."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ember import prims
from ember.inductor.codegen.triton import TritonBackend, size_variants
from ember.inductor.pipeline import compile_graph
from ember.runtime import ArtifactCache

CONTEXT = 256  # the mask's rows: the length's bound, so the softmax tile is 256 wide
MASK = torch.tril(torch.ones(CONTEXT, CONTEXT)).bool()
WIDTH, HEADS = 32, 2


def attention(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """GPT-2's attention: q, k, v copied per head, a causal mask sliced to the length."""
    batch, length, width = x.shape
    q, k, v = (x @ w).split(width, dim=2)
    q, k, v = (t.view(batch, length, HEADS, width // HEADS).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(width // HEADS)
    scores = scores.masked_fill(~MASK[:length, :length], float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return torch.nn.functional.layer_norm(
        out.transpose(1, 2).reshape(batch, length, width), (width,)
    )


def _inputs(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch * 1000 + length)
    x = torch.randn(batch, length, WIDTH, generator=generator)
    return x, torch.randn(WIDTH, 3 * WIDTH, generator=generator) / WIDTH**0.5


def traced(inputs: tuple[torch.Tensor, torch.Tensor]) -> prims.Graph:
    """`attention` traced with a symbolic batch and length."""
    tracer = prims.Tracer(prims.symbolic.ShapeEnv())
    x = tracer.add_input(inputs[0], "in0", dynamic_dims=(0, 1))
    w = tracer.add_input(inputs[1], "in1", dynamic_dims=())
    leaves = [prims.Ref(t.value_name) for t in (x, w)]
    tracer.set_inputs_signature(prims.tree_flatten(inputs)[1], leaves)
    with tracer.active():
        graph = tracer.finish(attention(x, w))
    assert len(graph.symbols) == 2, graph.symbols
    return graph


@pytest.fixture(scope="module", params=["specialized", "general"])
def compiled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> object:
    """The compiled attention; "general": generated with int32's limit at 50 elements, so
    that every point here takes the general (int64) body."""
    pytest.importorskip("triton")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1")
        if request.param == "general":
            patch.setattr(size_variants, "INT32_SAFE", 50)
        first = _inputs(2, 8)
        graph = traced(first)
        cache = ArtifactCache(tmp_path_factory.mktemp("size_variants"))
        return compile_graph(graph, first, backend=TritonBackend(), cache=cache)


# specialized: 16 takes the [., 16] tile; 48, 64 the [., 64] tile; 256 the full tile, all
# aligned; 4, 17, 200 the int32 body; batch 3 is not a multiple of 16 (only the length's
# alignment counts)
@pytest.mark.parametrize(
    ("batch", "length"), [(2, 16), (3, 48), (2, 64), (1, 256), (2, 4), (2, 17), (1, 200)]
)
def test_every_body_matches_eager(
    compiled: object, batch: int, length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x, w = _inputs(batch, length)
    torch.testing.assert_close(compiled(x, w), attention(x, w), rtol=1e-4, atol=1e-4)  # type: ignore[operator]


_BUILD = """
import json, sys
import torch
from ember.inductor.codegen.triton import TritonBackend, size_variants
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import generate
from ember.runtime import ArtifactCache
from triton.backends.compiler import GPUTarget
sys.path.insert(0, sys.argv[1])
from test_triton_size_variants import _inputs, traced

inputs = tuple(t.to(torch.bfloat16) for t in _inputs(2, 8))
graph = traced(inputs)
backend = TritonBackend()
artifact = generate(graph, backend, InductorConfig(), torch.device("cuda"))
kernels = backend.load(artifact["module"], ArtifactCache(sys.argv[2]))
target = GPUTarget("cuda", 90, 32)
print(json.dumps({name: kernel.precompile(target)[0].asm["ptx"] for name, kernel in kernels.items()}))
"""


def test_the_softmax_over_an_aligned_length_loads_vectors_on_sm90(tmp_path: Path) -> None:
    """Over a symbolic length the softmax loaded and stored bf16 one element at a time (its
    row start `s1*x` is not a multiple of 16 to Triton); the aligned body uses 16-byte loads
    and stores, as the static kernel does."""
    pytest.importorskip("triton")
    environment = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    folder = str(Path(__file__).parent)
    result = subprocess.run(
        [sys.executable, "-c", _BUILD, folder, str(tmp_path)],
        capture_output=True, text=True, env=environment, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    ptx = json.loads(result.stdout.strip().splitlines()[-1])
    (softmax,) = [text for name, text in ptx.items() if "amax" in name]
    assert "ld.global.v4.b32" in softmax and "st.global.v4.b32" in softmax
