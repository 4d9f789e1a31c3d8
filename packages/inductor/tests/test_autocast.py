"""A Graph captured under autocast holds its casts: compiling and running it under the
caller's autocast must not cast again (a float32 region stays float32), whichever backend
runs it: the interpreter (`eager`), ember-autodiff's re-trace (`aot_eager`) or inductor."""

from __future__ import annotations

import pytest
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


BACKENDS = ("eager", "aot_eager", "inductor")


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_regions_keep_their_dtypes(backend: str) -> None:
    torch.manual_seed(0)
    model = MixedPrecision().eval()
    compiled = ember.compile(model, backend=backend)
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


@pytest.mark.parametrize("backend", ("aot_eager", "inductor"))
def test_training_under_autocast_keeps_float32_regions(backend: str) -> None:
    """The joint forward/backward trace runs under the caller's autocast too: the float32
    region's gradient must be float32 math, as eager's is."""
    torch.manual_seed(0)
    model = MixedPrecision()
    twin = MixedPrecision()
    twin.load_state_dict(model.state_dict())
    compiled = ember.compile(twin, backend=backend)
    x = torch.randn(4, 16)
    for module in (model, compiled):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low, high = module(x)
        (high.sum() * 1e-2 + low.float().sum() * 0.0).backward()
    assert twin.linear.weight.grad is not None and model.linear.weight.grad is not None
    torch.testing.assert_close(twin.linear.weight.grad, model.linear.weight.grad)


def test_compiled_graph_restores_the_callers_autocast() -> None:
    # CompiledGraph runs its wrapper with autocast off and puts the caller's state back,
    # also when the call raises
    from ember.inductor.backend import inductor

    graphs: list = []

    def keep(graph, example_inputs):  # type: ignore[no-untyped-def]
        compiled = inductor(graph, example_inputs)
        graphs.append(compiled)
        return compiled

    model = MixedPrecision().eval()
    compiled = ember.compile(model, backend=keep)
    x = torch.randn(4, 16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        compiled(x)
        assert torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled("cuda")
        assert torch.get_autocast_dtype("cpu") is torch.bfloat16
        seen: list[bool] = []
        inner = graphs[0].call
        graphs[0].call = lambda args: (seen.append(torch.is_autocast_enabled("cpu")), 1 / 0)
        with pytest.raises(ZeroDivisionError):
            graphs[0](x, *[p for p in model.parameters()])
        graphs[0].call = inner
        assert seen == [False]
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") is torch.bfloat16
