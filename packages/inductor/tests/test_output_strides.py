"""A compiled Graph's outputs have the strides its spec declares (eager's), although the
prims it decomposes into make contiguous tensors: a backward Graph is compiled against the
strides of what its forward saved, and a caller may `view` an output as eager allows."""

from __future__ import annotations

import torch

import ember
from ember import prims
from ember.inductor.pipeline import compile_graph


def _transposed_scaled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x.transpose(1, 2) * 2  # eager keeps x's memory order: a transposed result
    return y, y.to(torch.bfloat16)  # bf16 is not a C++ kernel dtype: the wrapper restrides it


def test_outputs_keep_eager_strides() -> None:
    x = torch.randn(2, 8, 4, 16)
    compiled = compile_graph(prims.trace(_transposed_scaled, x), (x,))
    for ours, theirs in zip(compiled(x), _transposed_scaled(x)):
        assert ours.stride() == theirs.stride()
        torch.testing.assert_close(ours, theirs)


class Attention(torch.nn.Module):
    """Attention's head shuffling: eager's attention output keeps the query's memory order,
    so transposing it back is contiguous and `view` works; the backward Graph views what the
    forward saved the same way."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)
        self.out = torch.nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = torch.tanh(self.proj(x).view(2, 8, 4, 16).transpose(1, 2))  # (batch, head, seq, dim)
        attended = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        merged = attended.transpose(1, 2).view(2, 8, 64)  # a view only in eager's strides
        return self.out(merged).sum()


def test_backward_reads_what_forward_saved_in_eager_strides() -> None:
    torch.manual_seed(0)
    model, twin = Attention(), Attention()
    twin.load_state_dict(model.state_dict())
    compiled = ember.compile(twin, backend="inductor")
    x = torch.randn(2, 8, 64)
    model(x).backward()
    compiled(x).backward()
    for ours, theirs in zip(twin.parameters(), model.parameters()):
        assert ours.grad is not None and theirs.grad is not None
        torch.testing.assert_close(ours.grad, theirs.grad)
