"""End to end across the layers: `ember.compile` on small real models, compared with eager
PyTorch (outputs, gradients of parameters and inputs, buffer updates), for every ember
backend that is installed, with and without EMBER_SERIALIZE_BOUNDARIES.

With the boundaries on, every Graph a layer hands over travels through `dumps`/`loads`, which
proves the layers need nothing from each other but the serialized format.
`EMBER_TEST_DEVICE=cuda` runs the models on the GPU (inductor generates Triton there).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable

import pytest
import torch
from torch import nn

import ember
from ember.capture import list_backends
from ember.prims.testing import MLP, AttentionBlock, SmallCNN, example_input

DEVICE = torch.device(os.environ.get("EMBER_TEST_DEVICE", "cpu"))

# ember's own backends, in the order they land; each runs when its package is installed.
BACKENDS = [name for name in ("eager", "aot_eager", "inductor") if name in list_backends()]


MODELS: dict[str, Callable[[], nn.Module]] = {
    "mlp": MLP,
    "conv_bn": SmallCNN,
    "transformer_block": AttentionBlock,
}


@pytest.fixture(params=["direct", "serialized"])
def boundaries(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "serialized":
        monkeypatch.setenv("EMBER_SERIALIZE_BOUNDARIES", "1")
    else:
        monkeypatch.delenv("EMBER_SERIALIZE_BOUNDARIES", raising=False)
    ember.reset()
    return str(request.param)


def _close(actual: object, expected: object) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_step_matches_eager(name: str, backend: str, boundaries: str) -> None:
    del boundaries
    torch.manual_seed(0)
    model = MODELS[name]().train().to(DEVICE)
    twin = copy.deepcopy(model)
    compiled = ember.compile(twin, backend=backend)
    x = example_input(model).to(DEVICE)
    x_eager, x_compiled = x.clone().requires_grad_(), x.clone().requires_grad_()

    expected = model(x_eager)
    actual = compiled(x_compiled)
    _close(actual, expected)

    expected.square().mean().backward()
    actual.square().mean().backward()
    _close(x_compiled.grad, x_eager.grad)
    for (param_name, p_eager), (_, p_compiled) in zip(
        model.named_parameters(), twin.named_parameters(), strict=True
    ):
        assert p_compiled.grad is not None, f"{param_name} got no gradient"
        _close(p_compiled.grad, p_eager.grad)
    for (buffer_name, b_eager), (_, b_compiled) in zip(
        model.named_buffers(), twin.named_buffers(), strict=True
    ):
        assert torch.allclose(b_compiled.float(), b_eager.float(), rtol=1e-4, atol=1e-5), (
            buffer_name
        )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_inference_under_no_grad_matches_eager(name: str, backend: str, boundaries: str) -> None:
    del boundaries
    torch.manual_seed(1)
    model = MODELS[name]().eval().to(DEVICE)
    compiled = ember.compile(model, backend=backend)
    x = example_input(model).to(DEVICE)
    with torch.no_grad():
        expected = model(x)
        actual = compiled(x)
        again = compiled(x * 2)  # the cached compilation serves a new input of the same shape
        _close(again, model(x * 2))
    _close(actual, expected)
    assert not actual.requires_grad


def test_serialized_boundary_is_crossed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EMBER_SERIALIZE_BOUNDARIES", "1")
    ember.reset()
    compiled = ember.compile(lambda x: torch.sin(x) * 2, backend="eager")
    x = torch.randn(5)
    with caplog.at_level(logging.DEBUG, logger="ember.prims"):
        _close(compiled(x), torch.sin(x) * 2)
    crossings = [r.getMessage() for r in caplog.records if "boundary capture" in r.getMessage()]
    assert crossings, "capture handed its Graph to the backend without serializing it"


def test_backend_from_a_separately_installed_distribution() -> None:
    """`ember-test-backend` (packages/capture/tests/fixtures) declares `test_echo` in the
    `ember.backends` entry-point group; ember finds it by name with no registration."""
    import ember_test_backend

    ember.reset()
    ember_test_backend.counts.reset()
    model = MLP().eval()
    compiled = ember.compile(model, backend="test_echo")
    x = example_input(model, batch=3)
    with torch.no_grad():
        _close(compiled(x), model(x))
        compiled(x)
    assert ember_test_backend.counts.compilations == 1
    assert ember_test_backend.counts.calls == 2
