"""Kernels named by their content: equal kernels of a graph share one definition, and a kernel
has the same name and source in every graph that holds it (so Triton's and the C++ build's
source-keyed caches hit); results stay equal to eager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

import ember.prims as prims
from ember.inductor.codegen.backend import KernelSource
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph, generate
from ember.prims.config import load
from ember.runtime import ArtifactCache


class RecordingBackend(CppBackend):
    """The C++ backend, keeping the kernel definitions each module was made of."""

    def __init__(self) -> None:
        self.definitions: list[KernelSource] = []

    def module(self, kernels: Sequence[KernelSource]) -> str:
        self.definitions = list(kernels)
        return super().module(kernels)


def two_layers(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    # the same pointwise epilogue after each matmul: two kernels, one text
    h = torch.tanh(x @ w1) * 0.5 + 1.0
    return torch.tanh(h @ w2) * 0.5 + 1.0


def one_layer(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w) * 0.5 + 1.0


def scaled_then_one_layer(
    s: torch.Tensor, x: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    # another input before it and another kernel first: the layer's storages and its kernel's
    # position differ from one_layer's
    return torch.exp(s) * 2.0, one_layer(x, w)


def _inputs(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=generator) for shape in shapes]


def _definitions(fn: Callable[..., object], inputs: Sequence[torch.Tensor]) -> list[KernelSource]:
    backend = RecordingBackend()
    generate(prims.trace(fn, *inputs), backend, load(InductorConfig))
    return backend.definitions


def test_equal_kernels_of_a_graph_share_one_definition(tmp_path: Path) -> None:
    inputs = _inputs((8, 16), (16, 16), (16, 16))
    assert len(_definitions(two_layers, inputs)) == 1
    compiled = compile_graph(
        prims.trace(two_layers, *inputs), inputs, cache=ArtifactCache(tmp_path)
    )
    assert compiled.kernel_count == 2  # both launched
    torch.testing.assert_close(compiled(*inputs), two_layers(*inputs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_kernel_has_the_same_name_and_source_in_another_graph(dtype: torch.dtype) -> None:
    x, w, s = (t.to(dtype) for t in _inputs((8, 16), (16, 16), (4, 4)))
    alone = _definitions(one_layer, [x, w])
    assert len(alone) == 1
    within = {d.name: d.source for d in _definitions(scaled_then_one_layer, [s, x, w])}
    assert within.get(alone[0].name) == alone[0].source


def test_kernels_of_other_dtypes_are_not_merged() -> None:
    x, w = _inputs((8, 16), (16, 16))
    single = _definitions(one_layer, [x, w])
    double = _definitions(one_layer, [x.double(), w.double()])
    assert single[0].name != double[0].name


_TRITON_SCRIPT = """
import importlib.util, json, sys
import torch
import ember.prims as prims
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.pipeline import generate
from ember.prims.config import load
from ember.inductor.config import InductorConfig
from ember.runtime import ArtifactCache
from triton.backends.compiler import GPUTarget

spec = importlib.util.spec_from_file_location("kernel_names_cases", sys.argv[1])
cases = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cases)
x, w, s = cases._inputs((8, 16), (16, 16), (4, 4))
backend, cache = TritonBackend(), ArtifactCache(sys.argv[2])
keys = []
for fn, inputs in ((cases.one_layer, (x, w)), (cases.scaled_then_one_layer, (s, x, w))):
    graph = prims.trace(fn, *inputs)
    artifact = generate(graph, backend, load(InductorConfig), torch.device("cuda"))
    kernels = backend.load(artifact["module"], cache)
    keys.append({n: [c.hash for c in k.precompile(GPUTarget("cuda", 90, 32))] for n, k in kernels.items()})
print(json.dumps(keys))
"""


def test_a_kernel_in_another_graph_hits_tritons_compile_cache(tmp_path: Path) -> None:
    """Triton keys a compiled kernel by its text and the line it starts on: the layer's kernel,
    second in the other graph's module, must still have the same key (sm_90, no GPU needed)."""
    pytest.importorskip("triton")
    environment = {
        **os.environ,
        "TRITON_INTERPRET": "0",
        "CUDA_VISIBLE_DEVICES": "",
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
    }
    result = subprocess.run(
        [sys.executable, "-c", _TRITON_SCRIPT, __file__, str(tmp_path / "ember")],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    alone, within = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(alone) == 1 and len(within) == 2
    ((name, key),) = alone.items()
    assert within.get(name) == key
