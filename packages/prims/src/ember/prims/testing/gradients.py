"""One training step's check against eager: the outputs, then every parameter's gradient
after the same loss (the sum of squares, in float32) is backpropagated through both."""

from __future__ import annotations

import torch
from torch import nn


def assert_same_step(
    out: torch.Tensor, expected: torch.Tensor, module: nn.Module, reference: nn.Module
) -> None:
    """`out` (from `module`, compiled) equals `expected` (from `reference`, eager, with the
    same weights), and so does each parameter's gradient after backward of both."""
    torch.testing.assert_close(out, expected)
    out.float().square().sum().backward()
    expected.float().square().sum().backward()
    for (name, ours), theirs in zip(module.named_parameters(), reference.parameters()):
        assert ours.grad is not None, name
        torch.testing.assert_close(ours.grad, theirs.grad, msg=name)
