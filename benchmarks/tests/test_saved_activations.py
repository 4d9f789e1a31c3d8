"""benchmarks.saved_activations counts what a forward saves for the backward, once per storage,
with parameters and inputs apart: checked against hand-computed cases."""

from __future__ import annotations

import torch
from torch import nn

from benchmarks.saved_activations import Row, counting_saved, measure_step, table


class _Tiny(nn.Module):
    """relu(x @ W.T) * x_scale, summed: relu saves its result, mul saves both operands."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3, bias=False)
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.linear(x))
        return (hidden * self.scale).sum()


def test_saved_bytes_of_a_hand_computed_step() -> None:
    torch.manual_seed(0)
    module = _Tiny()
    x = torch.randn(5, 4)  # no grad: the linear saves x (for the weight's gradient) only
    saved, loss = measure_step(module, module, (x,))
    # relu saves its (5, 3) float32 result; mul saves `hidden` (the same storage) and the
    # parameter; linear saves x (an input). Activations: the relu result only.
    assert saved.activation_bytes == 5 * 3 * 4
    assert saved.total_bytes == 5 * 3 * 4 + 5 * 4 * 4 + 3 * 4
    assert saved.tensors >= 4
    assert module.scale.grad is not None and loss.ndim == 0


def test_one_storage_counts_once() -> None:
    x = torch.randn(8, requires_grad=True)
    with counting_saved() as saved:
        y = x.exp()  # saves its result
        z = y * y  # saves y twice
        (z.view(2, 4) * y.view(2, 4)).sum().backward()
    assert saved.tensors >= 3
    assert saved.total_bytes == 2 * 8 * 4  # x's exp and z: two storages
    assert saved.activation_bytes == saved.total_bytes


def test_table_lists_every_row() -> None:
    rows = [Row("m", "eager", total_bytes=2048, activation_bytes=1024, tensors=3)]
    text = table(rows)
    assert "| m | float32 | eager | 1.0 | 2.0 | 3 | - | - |" in text
