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
from ember.capture.variables.attention_mask import (
    attention_arguments,
    fused_kernel_mask,
    known_all_true,
)
from ember.prims import Graph, Ref, TensorSpec, Tracer


def _all_true_mask(batch: int, length: int) -> torch.Tensor:
    """transformers 5.17's bidirectional sdpa mask under a compiler: `q_idx >= 0`, expanded."""
    q_idx = torch.arange(length)[None, None, :, None]
    return (q_idx >= 0).expand(batch, -1, length, length)


class _BidirectionalAttention(nn.Module):
    """BERT-style self-attention that builds its mask as transformers does when compiled
    (all True, from an arange), or adds a per-query bias computed from its input, broadcast
    over the keys (stride 0 there; softmax ignores a constant per row)."""

    def __init__(self, width: int = 32, heads: int = 4, biased: bool = False) -> None:
        super().__init__()
        self.heads, self.biased = heads, biased
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q_idx = torch.arange(length, device=x.device)[None, None, :, None]
        mask = (q_idx >= 0).expand(batch, -1, length, length)
        if self.biased:
            mask = x.mean(-1)[:, None, :, None].expand(batch, 1, length, length)
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


def _attention_masks(graph: Graph) -> list[tuple[torch.dtype, tuple[int, ...]] | None]:
    """Per attention call in `graph`, the dtype and strides of the mask it received (None
    without one). torch turns a boolean mask into the additive one its kernel reads with
    `where` (after a `logical_not` in some versions): this walks back to the boolean."""
    specs = graph.values()
    producers = {out.name: node for node in graph.nodes for out in node.output_values()}
    masks: list[tuple[torch.dtype, tuple[int, ...]] | None] = []
    for node in graph.nodes:
        if "scaled_dot_product" not in node.target:
            continue
        mask = node.kwargs.get("attn_mask")
        while isinstance(mask, Ref) and mask.name in producers:
            producer = producers[mask.name]
            if producer.target not in ("aten::where.self", "aten::logical_not.default"):
                break
            mask = producer.args[0]
        if not isinstance(mask, Ref):
            masks.append(None)
            continue
        spec = specs[mask.name].spec
        assert isinstance(spec, TensorSpec)
        masks.append((spec.dtype, tuple(int(s) for s in spec.strides)))
    return masks


def _matches_eager(biased: bool, autocast: bool) -> Graph:
    torch.manual_seed(0)
    model = _BidirectionalAttention(biased=biased)
    reference = _BidirectionalAttention(biased=biased)
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
    return graph


@pytest.mark.parametrize("autocast", [False, True])
def test_an_all_true_mask_from_literals_is_dropped(autocast: bool) -> None:
    # transformers 5.17 under a compiler: eager passes no mask, and now neither does ember
    assert _attention_masks(_matches_eager(biased=False, autocast=autocast)) == [None]


@pytest.mark.parametrize("autocast", [False, True])
def test_a_broadcast_mask_from_inputs_gets_contiguous_keys(autocast: bool) -> None:
    (mask,) = _attention_masks(_matches_eager(biased=True, autocast=autocast))
    assert mask is not None and mask[1][-1] == 1, mask


def test_known_all_true_evaluates_literal_masks_only() -> None:
    tracer = Tracer()
    lengths = tracer.add_input(torch.tensor([4]), "lengths")
    with tracer.active():
        q_idx = torch.arange(4)[None, None, :, None]
        cases = {
            "all true": (q_idx >= 0).expand(1, 1, 4, 4),
            "one false": (q_idx >= 1).expand(1, 1, 4, 4),
            "from an input": (q_idx < lengths[:, None, None, None]).expand(1, 1, 4, 4),
            "random": torch.rand(1, 1, 4, 4) >= 0,
            "not boolean": (q_idx >= 0).float(),
        }
        seen = {name: known_all_true(mask) for name, mask in cases.items()}
    assert seen == {
        "all true": True,
        "one false": False,
        "from an input": False,
        "random": False,
        "not boolean": False,
    }
    assert not known_all_true(torch.ones(2, dtype=torch.bool))  # a real tensor: not traced
