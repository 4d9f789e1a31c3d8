"""Reductions of 16-bit values decompose as eager computes them: sums in float32, one rounding
at the end. A float16 sum of 40,000 values near 100 is 4e6, past float16's 65,504: the
decomposed `mean`, `var_mean` and `group_norm` gave inf and NaN where eager gives 100.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.nn import functional as F

from ember.prims import run, trace
from ember.prims.decompositions import PRIM_DECOMPOSITIONS, decompose
from ember.prims.primitives import is_prim

CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "mean": lambda x: torch.mean(x, 1),
    "mean_keepdim": lambda x: x.mean(-1, keepdim=True),
    "var_mean": lambda x: torch.var_mean(x, 1),
    "group_norm": lambda x: F.group_norm(x.view(6, 8, -1), 4),
    "group_norm_affine": lambda x: F.group_norm(
        x.view(6, 8, -1), 2, torch.linspace(0.5, 2, 8, dtype=x.dtype), torch.ones(8, dtype=x.dtype)
    ),
}


def _values(dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(6, 40_000, generator=generator) * 3 + 100
    x[:, 0] = 0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_16_bit_reduction_is_finite_and_as_close_as_eager(case: str, dtype: torch.dtype) -> None:
    fn, x = CASES[case], _values(dtype)
    graph = decompose(trace(fn, x), PRIM_DECOMPOSITIONS)
    assert all(is_prim(node.target) for node in graph.nodes)
    got, want = run(graph, x), fn(x)
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else (want,)
    reference = fn(x.double())
    reference = reference if isinstance(reference, (list, tuple)) else (reference,)
    for g, w, r in zip(got, want, reference):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.isfinite(g).all()
        # no further from the float64 result than eager, give or take one rounding
        step = torch.finfo(dtype).eps * r.abs().max().item()
        assert (g.double() - r).abs().max().item() <= (w.double() - r).abs().max().item() + step
