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
