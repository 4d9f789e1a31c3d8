"""scaled_dot_product_attention's mask is laid out for the GPU's fused kernels (stride 1 along
the keys) while capturing: transformers (5.17) passes `q_idx >= 0` broadcast over the keys under
a compiler, which sends a GPU to the float32 math path. Values and gradients stay eager's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.capture.compile import compile as ember_compile
from ember.capture.testing import CompileCounter
from ember.capture.variables.attention_mask import attention_arguments, fused_kernel_mask
from ember.prims import Graph, Ref, TensorSpec


def _all_true_mask(batch: int, length: int) -> torch.Tensor:
    """transformers 5.17's bidirectional sdpa mask under a compiler: `q_idx >= 0`, expanded."""
    q_idx = torch.arange(length)[None, None, :, None]
    return (q_idx >= 0).expand(batch, -1, length, length)


class _BidirectionalAttention(nn.Module):
    """BERT-style self-attention that builds its mask as transformers does when compiled."""

    def __init__(self, width: int = 32, heads: int = 4) -> None:
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
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.25)
        return self.out(attended.transpose(1, 2).reshape(batch, length, width))


def test_broadcast_mask_gets_contiguous_keys_and_keeps_values() -> None:
    mask = _all_true_mask(3, 5)
    assert mask.stride(-1) == 0
    laid_out = fused_kernel_mask(mask)
    assert laid_out.shape == mask.shape
    assert laid_out.stride(-1) == 1
    assert laid_out.stride(0) == 0  # the batch stays broadcast: one [1, 1, 5, 5] copy
    assert torch.equal(laid_out, mask)
    scores = torch.randn(2, 4, 6, 7)
    transposed = scores.transpose(-2, -1).contiguous().transpose(-2, -1)  # stride(-1) == 6
    assert torch.equal(fused_kernel_mask(transposed), scores)
    assert fused_kernel_mask(transposed).stride(-1) == 1
    dense = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    assert fused_kernel_mask(dense) is dense  # already fine: no copy


def test_mask_found_by_position_and_keyword() -> None:
    q = torch.randn(1, 2, 5, 4)
    mask = _all_true_mask(1, 5)
    args, _ = attention_arguments([q, q, q, mask], {})
    assert args[3].stride(-1) == 1
    _, kwargs = attention_arguments([q, q, q], {"attn_mask": mask, "scale": 0.5})
    assert kwargs["attn_mask"].stride(-1) == 1
    assert kwargs["scale"] == 0.5
    args, kwargs = attention_arguments([q, q, q], {"is_causal": True})
    assert len(args) == 3 and kwargs == {"is_causal": True}


def _mask_read_by_attention(graph: Graph) -> list[tuple[int, ...]]:
    """The strides of the boolean masks scaled_dot_product_attention received in `graph`:
    torch turns a boolean mask into the additive one its kernel reads with `where` (after a
    `logical_not` in some versions); this walks back from the kernel's mask to the boolean."""
    specs = graph.values()
    producers = {out.name: node for node in graph.nodes for out in node.output_values()}
    strides = []
    for node in graph.nodes:
        mask = node.kwargs.get("attn_mask") if "scaled_dot_product" in node.target else None
        while isinstance(mask, Ref) and mask.name in producers:
            producer = producers[mask.name]
            if producer.target not in ("aten::where.self", "aten::logical_not.default"):
                break
            mask = producer.args[0]
        if isinstance(mask, Ref):
            spec = specs[mask.name].spec
            assert isinstance(spec, TensorSpec)
            strides.append(tuple(int(s) for s in spec.strides))
    return strides


@pytest.mark.parametrize("autocast", [False, True])
def test_attention_with_broadcast_mask_matches_eager(autocast: bool) -> None:
    torch.manual_seed(0)
    model = _BidirectionalAttention()
    reference = _BidirectionalAttention()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 6, 32)
    counter = CompileCounter()
    compiled = ember_compile(model, backend=counter)
    with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        actual = compiled(x)
        expected = reference(x)
    torch.testing.assert_close(actual, expected)
    actual.float().square().sum().backward()
    expected.float().square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    (graph,) = counter.graphs
    masks = _mask_read_by_attention(graph)
    assert masks, "scaled_dot_product_attention received no boolean mask"
    assert all(stride[-1] == 1 for stride in masks), masks
