"""On a GPU, attention that transformers (5.17) gives an all-True mask broadcast over the keys
runs as torch's fused kernel through ember, not as float32 matmuls (the math path), in
training under bf16 autocast: the captured Graph calls the fused op (its backward follows in
the joint Graph), and values and gradients are as close to eager float32 as eager bf16's.

Needs a CUDA GPU (`EMBER_TEST_DEVICE=cuda` on the GPU machine); skipped elsewhere.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember
from ember.prims import Graph

pytestmark = pytest.mark.cuda

FUSED_ATTENTION = {
    "aten::_scaled_dot_product_cudnn_attention.default",
    "aten::_scaled_dot_product_flash_attention.default",
    "aten::_scaled_dot_product_efficient_attention.default",
}


class _BidirectionalAttention(nn.Module):
    """BERT-style self-attention with the mask transformers builds under a compiler."""

    def __init__(self, width: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q_idx = torch.arange(length, device=x.device)[None, None, :, None]
        mask = (q_idx >= 0).expand(batch, -1, length, length)
        q, k, v = (
            t.view(batch, length, self.heads, -1).transpose(1, 2)
            for t in self.qkv(x).split(width, dim=2)
        )
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(attended.transpose(1, 2).reshape(batch, length, width))


def _relative(actual: torch.Tensor, expected: torch.Tensor) -> float:
    difference = (actual.float() - expected.float()).norm()
    return float(difference / expected.float().norm().clamp_min(1e-12))


def _step(
    module: nn.Module, x: torch.Tensor, autocast: bool, run: Callable[..., Any] | None = None
) -> list[torch.Tensor]:
    with torch.autocast("cuda", torch.bfloat16, enabled=autocast):
        out = (run or module)(x)
    out.float().square().mean().backward()
    return [out.detach().float()] + [p.grad.detach().float() for p in module.parameters()]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("length", [128, 197])
def test_broadcast_mask_attention_trains_as_fused_kernel(length: int) -> None:
    from ember.inductor.backend import inductor

    graphs: list[Graph] = []

    def recording(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        graphs.append(graph)
        return inductor(graph, example_inputs)

    torch.manual_seed(0)
    model = _BidirectionalAttention().cuda()
    x = torch.randn(4, length, 256, device="cuda")
    reference = _step(copy.deepcopy(model), x, autocast=False)  # float32 eager
    eager_bf16 = _step(copy.deepcopy(model), x, autocast=True)
    ember.reset()
    twin = copy.deepcopy(model)
    actual = _step(twin, x, autocast=True, run=ember.compile(twin, backend=recording))

    (graph,) = graphs
    targets = [node.target for node in graph.nodes]
    assert FUSED_ATTENTION & set(targets), f"no fused attention op in {sorted(set(targets))}"
    batched = [node for node in graph.nodes if node.target == "aten::bmm.default"]
    assert not batched, "attention ran as batched matmuls (the math path)"
    for index, (got, want, bf16) in enumerate(zip(actual, reference, eager_bf16, strict=True)):
        bound = max(2 * _relative(bf16, want), 1e-2)
        assert _relative(got, want) <= bound, (index, _relative(got, want), _relative(bf16, want))
