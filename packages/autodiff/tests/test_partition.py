"""Partitioning: the forward and backward Graphs compute the joint Graph's results, the
min-cut forward saves fewer bytes than the naive one, and both halves verify and serialize."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.autodiff import PartitionError, is_recomputable, partition, trace_joint
from ember.prims import Graph, run, trace
from ember.prims.decompositions import PRIM_DECOMPOSITIONS
from ember.prims.serialize import dumps, loads


class _Block(nn.Module):
    """A pre-norm transformer block: LayerNorm, attention, LayerNorm, GELU MLP."""

    def __init__(self, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
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
        x = x + self.proj((weights @ v).transpose(1, 2).reshape(batch, length, width))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


def _setup() -> tuple[nn.Module, Graph, list[torch.Tensor]]:
    torch.manual_seed(0)
    block = _Block()
    x = torch.randn(2, 5, 16, requires_grad=True)
    graph = trace(block, x.detach())
    state = dict(block.named_parameters())
    primals = [x] + [state[gi.target] for gi in graph.state_inputs() if gi.target is not None]
    return block, graph, primals


def _run_partition(
    forward: Graph,
    backward: Graph,
    primals: list[torch.Tensor],
    tangent: torch.Tensor,
    outputs: int,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    results = run(forward, *[p.detach() for p in primals])
    grads = run(backward, *results[outputs:], tangent)
    return list(results[:outputs]), list(grads)


@pytest.mark.parametrize("decompositions", [None, PRIM_DECOMPOSITIONS], ids=["aten", "prims"])
def test_min_cut_saves_fewer_bytes_than_naive_with_identical_gradients(
    decompositions: Any,
) -> None:
    block, graph, primals = _setup()
    joint = trace_joint(graph, [True] * len(primals), decompositions)
    naive = partition(joint, "naive")
    min_cut = partition(joint, "min_cut")
    assert min_cut.saved_bytes < naive.saved_bytes
    tangent = torch.randn(2, 5, 16)
    expected = block(primals[0])
    expected_grads = torch.autograd.grad(expected, primals, tangent)
    for parts in (naive, min_cut):
        outputs, grads = _run_partition(
            parts.forward, parts.backward, primals, tangent, parts.num_forward_outputs
        )
        torch.testing.assert_close(outputs[0], expected)
        torch.testing.assert_close(grads, list(expected_grads))
    # Recomputing pointwise ops gives bit-identical results: the two splits agree exactly.
    naive_grads = _run_partition(naive.forward, naive.backward, primals, tangent, 1)[1]
    min_cut_grads = _run_partition(min_cut.forward, min_cut.backward, primals, tangent, 1)[1]
    torch.testing.assert_close(min_cut_grads, naive_grads, rtol=0, atol=0)


def test_min_cut_recomputes_cheap_ops_in_the_backward() -> None:
    _, graph, primals = _setup()
    parts = partition(trace_joint(graph, [True] * len(primals)), "min_cut")
    forward_values = {v.name for node in parts.forward.nodes for v in node.output_values()}
    recomputed = [
        node
        for node in parts.backward.nodes
        if any(v.name in forward_values for v in node.output_values())
    ]
    assert any(node.target == "aten::gelu.default" for node in recomputed)
    assert all(is_recomputable(node.target) for node in recomputed)
    assert not is_recomputable("aten::mm.default")
    assert not is_recomputable("aten::native_dropout.default")


@pytest.mark.parametrize("partitioner", ["naive", "min_cut"])
def test_partitioned_graphs_verify_and_round_trip(partitioner: str) -> None:
    _, graph, primals = _setup()
    parts = partition(trace_joint(graph, [True] * len(primals)), partitioner)
    for half in (parts.forward, parts.backward):
        half.verify()
        assert loads(dumps(half)) == half
    assert len(parts.forward.output_leaves) == 1 + len(parts.saved)
    assert len(parts.backward.output_leaves) == len(primals)


def test_unknown_partitioner_is_an_error() -> None:
    _, graph, primals = _setup()
    with pytest.raises(PartitionError, match="min_cut"):
        partition(trace_joint(graph, [True] * len(primals)), "greedy")
