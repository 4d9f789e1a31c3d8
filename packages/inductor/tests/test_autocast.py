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
