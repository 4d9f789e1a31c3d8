"""The model zoo under `ember.compile` with the default backend (inductor, C++ on CPU):
forward outputs, gradients, in-place updates of inputs and BatchNorm buffers match eager.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember.capture as capture

TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


@pytest.fixture(autouse=True, scope="module")
def _shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.mktemp("ember-cache")))
        yield


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh())
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.head(self.net(x)), -1)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        return self.fc(F.relu(self.conv2(x)).mean((2, 3)))


class Block(nn.Module):
    """A pre-norm transformer block with hand-written causal attention."""

    def __init__(self, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, 2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        attention = scores.masked_fill(causal, float("-inf")).softmax(-1)
        y = (attention @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class FlashBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(2, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(1)


def views_and_inplace(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = x.clone()
    z[:, 1:].mul_(2)
    flat = z.view(-1)
    flat.add_(y.view(-1))
    z.t().relu_()
    return z, flat[3:7], torch.cat([z, y], 0).sum(0)


def mutates_input(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.mul_(2).add_(y)
    return x.sum()


MODULES: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "mlp": lambda: (MLP(), (torch.randn(8, 16),)),
    "cnn_batchnorm": lambda: (CNN(), (torch.randn(2, 3, 16, 16),)),
    "transformer_block": lambda: (Block(), (torch.randn(2, 8, 32),)),
    "sdpa": lambda: (FlashBlock(), (torch.randn(2, 8, 16),)),
}


def _check_module(
    model: nn.Module, inputs: tuple[torch.Tensor, ...], train: bool, grad_inputs: bool = True
) -> None:
    reference = copy.deepcopy(model)
    compiled = capture.compile(model)
    if not train:
        with torch.no_grad():
            torch.testing.assert_close(compiled(*inputs), reference(*inputs), **TOLERANCE)
    else:
        ours = [t.clone().requires_grad_(grad_inputs) for t in inputs]
        theirs = [t.clone().requires_grad_(grad_inputs) for t in inputs]
        out, expected = compiled(*ours), reference(*theirs)
        torch.testing.assert_close(out, expected, **TOLERANCE)
        out.pow(2).sum().backward()
        expected.pow(2).sum().backward()
        for a, b in zip(ours, theirs):
            if grad_inputs:
                torch.testing.assert_close(a.grad, b.grad, **TOLERANCE)
        for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, **TOLERANCE, msg=name)
    for (name, a), (_, b) in zip(model.named_buffers(), reference.named_buffers()):
        torch.testing.assert_close(a, b, msg=name)


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_model_zoo_matches_eager(name: str, train: bool) -> None:
    torch.manual_seed(0)
    model, inputs = MODULES[name]()
    _check_module(model, inputs, train)


def test_batchnorm_eval_mode_matches_eager() -> None:
    torch.manual_seed(0)
    model, inputs = MODULES["cnn_batchnorm"]()
    _check_module(model.eval(), inputs, train=False)


@pytest.mark.parametrize("fn", [views_and_inplace, mutates_input], ids=lambda f: f.__name__)
def test_views_and_inplace_functions_match_eager(fn: Callable[..., Any]) -> None:
    torch.manual_seed(0)
    inputs = (torch.randn(4, 4), torch.randn(4, 4))
    ours, theirs = [t.clone() for t in inputs], [t.clone() for t in inputs]
    torch.testing.assert_close(capture.compile(fn)(*ours), fn(*theirs), **TOLERANCE)
    for a, b in zip(ours, theirs):  # in-place updates of the inputs
        torch.testing.assert_close(a, b)


def test_output_view_aliases_its_base() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        return y, y.view(-1)[2:5]

    y, view = capture.compile(fn)(torch.randn(3, 3))
    y.zero_()
    assert view.abs().sum().item() == 0.0  # the view sees writes to its base, as in eager


transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_transformers_resnet_from_config(train: bool) -> None:
    torch.manual_seed(0)
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    model = transformers.ResNetForImageClassification(config)
    model.train(train)

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(pixel_values=x).logits

    _check_module(Logits(), (torch.randn(2, 3, 32, 32),), train)


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_transformers_gpt2_from_config(train: bool) -> None:
    """GPT-2 (2 layers; the 12-layer GPT-2 small config is checked by hand, see the report)."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32, bos_token_id=0,
        eos_token_id=0, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
    )  # fmt: skip

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = transformers.GPT2LMHeadModel(config)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids).logits

    _check_module(
        Logits().train(train), (torch.randint(0, 128, (2, 16)),), train, grad_inputs=False
    )
