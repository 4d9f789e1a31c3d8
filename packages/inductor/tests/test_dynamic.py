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


def _vector_matrix(v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return torch.matmul(v, m)  # unsqueeze, mm, then squeeze_ in place of the product


def _in_place_views(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y.unsqueeze_(0)
    y.t_()
    return y + 1


def test_in_place_view_ops_over_symbolic_sizes_keep_their_new_layout(tmp_path: Path) -> None:
    # the product's squeeze_ changed its sizes at run time but the lowering kept (1, s2): the
    # output copy stored every element at index 0 and returned uninitialized memory
    # (OpInfo matmul under dynamic=True; the default policy's recompile after a size change)
    v, m = torch.randn(10), torch.randn(10, 5)
    compiled = compile_graph(
        prims.trace(_vector_matrix, v, m, dynamic=True), (v, m), cache=ArtifactCache(tmp_path)
    )
    for n, k in ((10, 5), (12, 5), (3, 5)):  # prims.trace makes the first dims symbolic
        v, m = torch.randn(n), torch.randn(n, k)
        torch.testing.assert_close(compiled(v, m), _vector_matrix(v, m))
    x = torch.randn(6)
    compiled = compile_graph(
        prims.trace(_in_place_views, x, dynamic=True), (x,), cache=ArtifactCache(tmp_path)
    )
    for n in (6, 11):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), _in_place_views(x))
