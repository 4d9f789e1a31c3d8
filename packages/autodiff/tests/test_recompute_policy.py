"""The min-cut partitioner's recompute policy: parameters are free to save, views are never
saved, casts of parameters are recomputed rather than saved, random and matmul results are
never recomputed; gradients through aot_eager equal eager's on blocks with dropout, layer norm,
GELU, softmax and attention (bf16 autocast included)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.autodiff import aot_eager, partition, trace_joint
from ember.autodiff.dead_code import references
from ember.autodiff.recompute_policy import (
    RecomputePolicy,
    is_fusible,
    is_recomputable,
    is_view,
    saving_cost,
)
from ember.prims import run, trace
from ember.prims.testing import assert_same_step


class _Attention(nn.Module):
    """LayerNorm, explicit softmax attention with dropout, GELU MLP with dropout."""

    def __init__(self, width: int = 16, heads: int = 2, p: float = 0.25) -> None:
        super().__init__()
        self.heads, self.p = heads, p
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        head = width // self.heads
        q, k, v = (t.view(batch, length, self.heads, head).transpose(1, 2) for t in (q, k, v))
        weights = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(head), dim=-1)
        weights = F.dropout(weights, self.p, self.training)
        x = x + self.proj((weights @ v).transpose(1, 2).reshape(batch, length, width))
        hidden = F.dropout(F.gelu(self.up(self.ln2(x))), self.p, self.training)
        return x + self.down(hidden)


class _Sdpa(nn.Module):
    """scaled_dot_product_attention with dropout inside, then a GELU."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.25, is_causal=True)
        return F.gelu(self.norm(out.squeeze(1) + x))


def _primals(module: nn.Module, x: torch.Tensor) -> tuple[list[torch.Tensor], list[int]]:
    graph = trace(module, x)
    state = dict(module.named_parameters())
    primals = [x] + [state[gi.target] for gi in graph.state_inputs() if gi.target is not None]
    return primals, list(range(1, len(primals)))


def _attention_partition(training: bool) -> tuple[Any, Any]:
    """The joint trace of a seeded `_Attention` step and its min-cut partition, parameters
    resident."""
    torch.manual_seed(0)
    module = _Attention().train(training)
    x = torch.randn(2, 5, 16)
    primals, resident = _primals(module, x)
    joint = trace_joint(trace(module, x), [True] * len(primals))
    return joint, partition(joint, "min_cut", resident)


def test_op_classes() -> None:
    assert is_recomputable("aten::gelu.default") and is_fusible("aten::gelu.default")
    assert is_recomputable("aten::_to_copy.default")
    assert is_view("aten::t.default") and is_view("aten::transpose.int")
    assert not is_view("aten::add.Tensor")
    for target in ("aten::mm.default", "aten::convolution.default", "aten::sum.dim_IntList"):
        assert not is_recomputable(target), target
    assert not is_recomputable("aten::native_dropout.default")
    assert not is_recomputable("aten::bernoulli.p")


def test_saving_cost_weighs_bytes_fusion_and_distance() -> None:
    policy = RecomputePolicy()
    assert saving_cost(1000, 1, False, policy) == 1100
    assert saving_cost(1000, 1, True, policy) == 2200  # a fused value costs its write too
    assert saving_cost(1000, 3, False, policy) == 1331  # 1.1 per step from the backward
    assert saving_cost(1000, 10**9, False, policy) == saving_cost(1000, 100, False, policy)
    flat = RecomputePolicy(fused_value_factor=1, distance_per_mille=1000)
    assert saving_cost(1000, 7, True, flat) == 1000


def test_parameters_are_free_and_their_casts_are_recomputed() -> None:
    """Under bf16 autocast a Linear casts its weight; the cut on its own saves the float32
    parameter (alive anyway) and recomputes the cast in the backward instead of saving a bf16
    copy. The weight-copy rule (on by default) saves the one copy a matmul reads in both
    halves: the second Linear's, read again for the input gradient."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8))
    x = torch.randn(4, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        graph = trace(module, x)
    primals, resident = _primals(module, x)
    joint = trace_joint(graph, [False] + [True] * len(resident))
    without = partition(joint, "min_cut")
    cut_alone = RecomputePolicy(save_weight_copies=False)
    parts = partition(joint, "min_cut", resident, cut_alone)
    producer = {v.name: n.target for n in joint.graph.nodes for v in n.output_values()}
    weights = {joint.graph.input_leaves[i].name for i in resident}

    def saved_casts(saved: list[str]) -> list[tuple[int, ...]]:
        return [
            tuple(joint.graph.values()[name].spec.shape)
            for name in saved
            if producer.get(name) == "aten::_to_copy.default"
            and joint.graph.values()[name].spec.shape in ((64, 32), (8, 64))
        ]

    assert saved_casts(parts.saved) == []
    assert saved_casts(partition(joint, "min_cut", resident).saved) == [(8, 64)]
    assert weights & set(parts.saved)  # the parameters themselves are saved instead
    activation = sum(
        math.prod(joint.graph.values()[n].spec.shape) * joint.graph.values()[n].spec.dtype.itemsize
        for n in parts.saved
        if n not in weights
    )
    assert activation < without.saved_bytes
    # Gradients equal eager's under autocast.
    results = run(parts.forward, *[p.detach() for p in primals])
    tangent = torch.randn(4, 8, dtype=torch.bfloat16)
    grads = run(parts.backward, *results[1:], tangent)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = module(x)
    expected_grads = torch.autograd.grad(expected, primals[1:], tangent)
    torch.testing.assert_close(results[0], expected)
    for got, want in zip(grads[1:], expected_grads):
        torch.testing.assert_close(got, want)


def test_whole_views_are_never_saved() -> None:
    joint, parts = _attention_partition(training=False)
    nodes = {v.name: n for n in joint.graph.nodes for v in n.output_values()}
    values = joint.graph.values()

    def size(name: str) -> int:
        spec = values[name].spec
        return math.prod(spec.shape) * spec.dtype.itemsize

    # A view as large as its base (view, transpose, t) is never saved; its base is.
    whole_views = [
        name
        for name in parts.saved
        if name in nodes
        and is_view(nodes[name].target)
        and size(name) >= max(size(ref.name) for ref in references(nodes[name]))
    ]
    assert whole_views == []
    naive = partition(joint, "naive")
    assert parts.saved_bytes < naive.saved_bytes


@pytest.mark.parametrize("model", [_Attention, _Sdpa])
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16"])
def test_gradients_equal_eager_with_dropout(model: type[nn.Module], autocast: bool) -> None:
    """The whole step through aot_eager (default min-cut policy) against eager, the same seed
    for both so that dropout draws the same masks."""
    torch.manual_seed(0)
    module = model().train()
    reference = model().train()
    reference.load_state_dict(module.state_dict())
    x = torch.randn(2, 5, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        compiled = aot_eager(trace(module, x), [x])
        torch.manual_seed(1)
        out = compiled(x)
        torch.manual_seed(1)
        expected = reference(x)
    assert_same_step(out, expected, module, reference)


def test_random_and_matmul_results_are_saved_not_recomputed() -> None:
    _, parts = _attention_partition(training=True)
    forward_values = {v.name for node in parts.forward.nodes for v in node.output_values()}
    for node in parts.backward.nodes:
        if any(v.name in forward_values for v in node.output_values()):
            assert is_recomputable(node.target), node.target


def test_a_matmul_product_costs_its_bytes_once() -> None:
    """A bf16 product read by a float32 upcast and an exp whose backward needs it again: the
    product is in memory whatever the cut (its writer is a matmul), so saving it costs its 2
    bytes an element, less than the float32 exp (4); it used to be priced as fused (x2)."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(8, 16, generator=generator, requires_grad=True)
    b = torch.randn(16, 64, generator=generator, requires_grad=True)

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.exp((a.bfloat16() @ b.bfloat16()).float()).sum(-1)

    graph = trace(fn, a, b)
    parts = partition(trace_joint(graph, [True, True]), "min_cut")
    producer = {v.name: n.target for n in parts.forward.nodes for v in n.output_values()}
    saved = {producer.get(name) for name in parts.saved}
    assert "aten::mm.default" in saved and "aten::exp.default" not in saved
    tangent = torch.randn(8, generator=generator)
    results = run(parts.forward, a.detach(), b.detach())
    grads = run(parts.backward, *results[1:], tangent)
    expected = torch.autograd.grad(fn(a, b), (a, b), tangent)
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)
