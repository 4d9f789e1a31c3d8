"""Composite torch functions keep symbolic sizes symbolic, whatever torch's C++ decomposition
does with them: torch 2.11's `matmul` read concrete sizes (issue 19: on the GPU machine every
new prompt length recompiled a decoder), emulated here by `matmul_reading_concrete_sizes`."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import pytest
import torch
from torch.nn import functional as F

from ember.prims import run, trace
from ember.prims.testing.torch_releases import matmul_reading_concrete_sizes

WEIGHT = torch.randn(5, 8)
MATRIX = torch.randn(8, 5)
VECTOR = torch.randn(8)
BIAS = torch.randn(5)

# Each takes x of shape (n, 4, 8); n is the traced symbol.
PRODUCTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "rows and columns (attention scores)": lambda x: x.transpose(0, 1) @ x.permute(1, 2, 0),
    "batch": lambda x: torch.matmul(x, x.transpose(1, 2)),
    "4-d broadcast batch": lambda x: x[None].matmul(x[:1].transpose(-1, -2)),
    "batched times matrix": lambda x: x @ MATRIX,
    "batched times vector": lambda x: x @ VECTOR,
    "vector times batched": lambda x: VECTOR @ x.transpose(1, 2),
    "matrix times batched": lambda x: MATRIX.t() @ x.transpose(1, 2),
    "linear without bias": lambda x: F.linear(x, WEIGHT),
    "linear of a non-contiguous input": lambda x: F.linear(x.transpose(0, 1), WEIGHT, BIAS),
}


@pytest.mark.parametrize("release", ["installed", "reading concrete sizes"])
@pytest.mark.parametrize("name", list(PRODUCTS))
def test_matrix_products_keep_symbolic_sizes(name: str, release: str) -> None:
    fn = PRODUCTS[name]
    emulated = release == "reading concrete sizes"
    with matmul_reading_concrete_sizes() if emulated else nullcontext():
        graph = trace(fn, torch.randn(6, 4, 8), dynamic=True)
        for size in (6, 3, 11):
            x = torch.randn(size, 4, 8)
            torch.testing.assert_close(run(graph, x), fn(x), rtol=1e-5, atol=1e-5)
    assert graph.guards == [], f"{name}: {graph.guards}"
    assert not isinstance(graph.inputs[0].value.spec.shape[0], int)


def test_the_emulated_release_specializes_what_torch_decomposes() -> None:
    """The emulation is faithful: a matmul that reaches it with symbolic sizes guards them."""
    from ember.prims.tracer.symbolic_composites import SYMBOLIC_COMPOSITES

    saved = dict(SYMBOLIC_COMPOSITES)
    SYMBOLIC_COMPOSITES.clear()
    try:
        with matmul_reading_concrete_sizes():
            graph = trace(PRODUCTS["batch"], torch.randn(6, 4, 8), dynamic=True)
    finally:
        SYMBOLIC_COMPOSITES.update(saved)
    assert [str(guard.expr) for guard in graph.guards] == ["Eq(s0, 6)"]


@pytest.mark.parametrize("name", ["linear without bias", "linear of a non-contiguous input"])
def test_products_under_autocast_keep_eager_dtypes(name: str) -> None:
    fn = PRODUCTS[name]
    with torch.autocast("cpu", torch.bfloat16):
        graph = trace(fn, torch.randn(6, 4, 8), dynamic=True)
        x = torch.randn(9, 4, 8)
        expected = fn(x)
    actual = run(graph, x)
    assert actual.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=1e-2)  # bf16 roundings


def test_linear_under_autocast_casts_the_weight_before_transposing_it() -> None:
    """As eager's Graph does: `t(w.to(bf16))` is a plain cast and a view the matmul takes
    transposed; `t(w).to(bf16)` declared a row-major (transposed) copy for the matmul, which
    the GPU code generator wrote out across rows (issue 19: 3x a static graph's cast time)."""
    with torch.autocast("cpu", torch.bfloat16):
        graph = trace(lambda x: F.linear(x, WEIGHT, BIAS), torch.randn(6, 4, 8), dynamic=True)
    producers = {v.name: n for n in graph.nodes for v in n.output_values()}
    (product,) = [n for n in graph.nodes if n.target == "aten::addmm.default"]
    weight = producers[product.args[2].name]
    assert weight.target == "aten::t.default"
    cast = producers[weight.args[0].name]
    assert cast.target == "aten::_to_copy.default" and cast.kwargs["dtype"] == torch.bfloat16
    assert product.outputs[0].spec.dtype == torch.bfloat16
