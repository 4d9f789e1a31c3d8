"""Dynamic shapes through the default backend: a GPT-2-style decoder called with prompt
lengths 4..64 compiles at most twice (static, then the length symbolic) and matches eager.
ember-inductor runs the symbolic Graph through its extern path (ATen op by op)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch.nn import functional as F

import ember
from ember.capture.testing import TinyDecoder

PROMPT_LENGTHS = (4, 5, 9, 16, 33, 64)


@pytest.fixture(autouse=True, scope="module")
def _shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.mktemp("ember-cache")))
        yield


def test_the_umbrella_exports_the_marks() -> None:
    assert ember.mark_dynamic is ember.capture.mark_dynamic
    assert ember.mark_static is ember.capture.mark_static


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_decoder_over_prompt_lengths_compiles_at_most_twice(backend: str) -> None:
    torch.manual_seed(0)
    model = TinyDecoder().eval()
    compiled = ember.compile(model, backend=backend)
    with torch.no_grad():
        for length in PROMPT_LENGTHS:
            ids = torch.randint(0, 50, (2, length))
            torch.testing.assert_close(compiled(ids), model(ids), rtol=1e-4, atol=1e-4)
    state = compiled.forward._ember_compiled
    assert state.captures == 2, state.recompile_reasons
    assert state.eager_fallbacks == 0


def test_decoder_training_with_variable_lengths_matches_eager() -> None:
    torch.manual_seed(0)
    model = TinyDecoder()
    reference = TinyDecoder()
    reference.load_state_dict(model.state_dict())
    compiled = ember.compile(model)
    for length in (6, 11, 20):
        ids = torch.randint(0, 50, (2, length))
        compiled(ids).logsumexp(-1).mean().backward()
        reference(ids).logsumexp(-1).mean().backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert compiled.forward._ember_compiled.captures == 2


def test_transformers_llama_training_over_lengths_compiles_twice() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config)
    reference = transformers.LlamaForCausalLM(config)
    reference.load_state_dict(model.state_dict())
    compiled = ember.compile(model)
    for length in (6, 11, 20):
        ids = torch.randint(0, 100, (2, length))
        loss = compiled(input_ids=ids, labels=ids, use_cache=False).loss
        expected = reference(input_ids=ids, labels=ids, use_cache=False).loss
        torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-4)
        loss.backward()
        expected.backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5, msg=name)
    state = compiled.forward._ember_compiled
    assert state.captures == 2, state.recompile_reasons


def _backward_ops_torch_cannot_size(
    x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor
) -> torch.Tensor:
    # each backward op here has a torch meta kernel that refuses symbolic sizes: ember's
    # decompositions give the joint trace their results (issue 19)
    activations = F.hardswish(x) + F.hardsigmoid(x) + F.logsigmoid(x) + F.softshrink(x)
    normed = F.group_norm(activations, 2, weight)
    losses = F.smooth_l1_loss(normed, target, beta=0.5) + F.huber_loss(normed, target)
    return losses + F.glu(normed, dim=1).square().mean()


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_gradients_of_backward_ops_over_symbolic_sizes_compile_once(backend: str) -> None:
    torch.manual_seed(0)
    weight = torch.randn(4)
    compiled = ember.compile(_backward_ops_torch_cannot_size, backend=backend, dynamic=True)
    for rows in (3, 7):
        x = (torch.randn(rows, 4, 5) * 4).requires_grad_()
        w = weight.clone().requires_grad_()
        target = torch.randn(rows, 4, 5)
        actual = compiled(x, target, w)
        actual_grads = torch.autograd.grad(actual, [x, w])
        x_eager, w_eager = x.detach().requires_grad_(), weight.clone().requires_grad_()
        expected = _backward_ops_torch_cannot_size(x_eager, target, w_eager)
        expected_grads = torch.autograd.grad(expected, [x_eager, w_eager])
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(actual_grads, expected_grads, rtol=1e-4, atol=1e-5)
    assert compiled._ember_compiled.captures == 1
