"""A Graph captured under autocast holds its casts: compiling and running it under the
caller's autocast must not cast again (a float32 region stays float32)."""

from __future__ import annotations

import torch
from torch import nn

import ember


class MixedPrecision(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        low = self.linear(x)  # bfloat16 under autocast
        with torch.autocast("cpu", enabled=False):
            high = torch.matmul(x.float(), self.linear.weight.float().t())  # stays float32
        return low, high


def test_autocast_regions_keep_their_dtypes() -> None:
    torch.manual_seed(0)
    model = MixedPrecision().eval()
    compiled = ember.compile(model, backend="inductor")
    x = torch.randn(4, 16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        low, high = model(x)
        ours_low, ours_high = compiled(x)
    assert (
        (ours_low.dtype, ours_high.dtype)
        == (low.dtype, high.dtype)
        == (
            torch.bfloat16,
            torch.float32,
        )
    )
    torch.testing.assert_close(ours_high, high)  # exact float32 math, not a bf16 round trip
    torch.testing.assert_close(ours_low, low, rtol=2e-2, atol=2e-2)


def test_entering_autocast_recompiles() -> None:
    """A Graph captured without autocast must not serve a call under autocast (capture guards
    on autocast's state, so the second call records the casts)."""
    torch.manual_seed(0)
    linear = nn.Linear(8, 8).eval()
    compiled = ember.compile(linear, backend="inductor")
    x = torch.randn(2, 8)
    with torch.no_grad():
        assert compiled(x).dtype == torch.float32
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ours, theirs = compiled(x), linear(x)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)
