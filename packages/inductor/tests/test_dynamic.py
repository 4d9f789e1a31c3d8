"""A Graph with symbolic sizes compiles once and runs for other sizes (its ops run as extern
calls until decompositions take symbols: TODO(issue 6))."""

from __future__ import annotations

from pathlib import Path

import torch

import ember.prims as prims
from ember.inductor.pipeline import compile_graph
from ember.runtime import ArtifactCache


def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x @ w, -1).sum(0) + x.mean()


def test_symbolic_sizes_bind_from_the_inputs(tmp_path: Path) -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    compiled = compile_graph(
        prims.trace(fn, x, w, dynamic=True), (x, w), cache=ArtifactCache(tmp_path)
    )
    for rows in (8, 3, 21):
        x = torch.randn(rows, 16)
        torch.testing.assert_close(compiled(x, w), fn(x, w), rtol=1e-5, atol=1e-6)


def _strided_conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.conv2d(x, w, stride=2, padding=1).relu()


def test_a_convolution_over_symbolic_image_sizes(tmp_path: Path) -> None:
    # the output's sizes are floor((s + 1)/2): the wrapper prints sympy's floor as `//`
    x, w = torch.randn(2, 3, 9, 10), torch.randn(4, 3, 3, 3)
    tracer = prims.Tracer(prims.symbolic.ShapeEnv())
    traced_x = tracer.add_input(x, "x", dynamic_dims=(2, 3))
    traced_w = tracer.add_input(w, "w")
    leaves = [prims.Ref(traced_x.value_name), prims.Ref(traced_w.value_name)]
    tracer.set_inputs_signature(prims.tree_flatten((x, w))[1], leaves)
    with tracer.active():
        out = _strided_conv(traced_x, traced_w)
    graph = tracer.finish(out)
    assert graph.symbols
    compiled = compile_graph(graph, (x, w), cache=ArtifactCache(tmp_path))
    for height, width in ((9, 10), (16, 5), (7, 31)):
        x = torch.randn(2, 3, height, width)
        torch.testing.assert_close(compiled(x, w), _strided_conv(x, w), rtol=1e-5, atol=1e-5)
