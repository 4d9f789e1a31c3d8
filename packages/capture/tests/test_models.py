"""Whole models: a GPT-style transformer written here compiles to one graph and matches
eager (forward values, and gradients of every parameter)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.capture.compile import compile as ember_compile
from ember.capture.testing import CompileCounter


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.register_buffer("mask", torch.tril(torch.ones(16, 16)).bool())

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        head = width // self.heads
        q, k, v = (t.view(batch, length, self.heads, head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(head)
        scores = scores.masked_fill(~self.mask[:length, :length], float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).contiguous().view(batch, length, width))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 50, width: int = 32, heads: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(16, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied embeddings

    def forward(self, ids, targets=None):
        length = ids.shape[1]
        positions = torch.arange(length, device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def test_gpt_forward_and_backward_match_eager() -> None:
    torch.manual_seed(0)
    model = GPT()
    reference = GPT()
    reference.load_state_dict(model.state_dict())
    ids = torch.randint(0, 50, (2, 12))
    targets = torch.randint(0, 50, (2, 12))
    counter = CompileCounter()
    compiled = ember_compile(model, backend=counter)
    logits, loss = compiled(ids, targets)
    expected_logits, expected_loss = reference(ids, targets)
    torch.testing.assert_close(logits, expected_logits)
    torch.testing.assert_close(loss, expected_loss)
    assert counter.frame_count == 1
    loss.backward()
    expected_loss.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    logits, none = compiled(ids)
    assert none is None
    torch.testing.assert_close(logits, reference(ids)[0])
    assert counter.frame_count == 2  # targets=None is a different program


def test_transformers_resnet_from_config_is_one_graph() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    model = transformers.ResNetModel(config).eval()
    reference = transformers.ResNetModel(config).eval()
    reference.load_state_dict(model.state_dict())
    pixels = torch.randn(2, 3, 32, 32)
    counter = CompileCounter()
    compiled = ember_compile(model, backend=counter)
    out = compiled(pixels)
    expected = reference(pixels)
    assert type(out) is type(expected)
    torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state)
    torch.testing.assert_close(out.pooler_output, expected.pooler_output)
    assert counter.frame_count == 1


def test_transformers_gpt2_from_config_is_one_graph() -> None:
    """GPT-2 from transformers (random weights, CPU) is captured whole, as by torch.compile:
    the DynamicCache it creates is modelled and rebuilt after the graph, its output-recording
    ContextVar is skipped because torch.compiler.is_compiling() answers True, and a config
    read through its attribute_map is guarded. The output (logits and the KV cache) matches
    eager, and a second call reuses the graph."""
    transformers = pytest.importorskip("transformers")
    from ember.capture.explain import collecting

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=32,
        vocab_size=100,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 100, (2, 8))
    expected = model(ids)
    counter = CompileCounter()
    compiled = ember_compile(model, backend=counter)
    with collecting() as seen:
        out = compiled(ids)
    assert type(out) is type(expected)
    torch.testing.assert_close(out.logits, expected.logits)
    assert (counter.frame_count, seen.break_count) == (1, 0), seen
    cache, expected_cache = out.past_key_values, expected.past_key_values
    assert type(cache) is type(expected_cache) and len(cache.layers) == len(expected_cache.layers)
    for layer, expected_layer in zip(cache.layers, expected_cache.layers):
        assert type(layer) is type(expected_layer)
        torch.testing.assert_close(layer.keys, expected_layer.keys)
        torch.testing.assert_close(layer.values, expected_layer.values)
    with collecting() as again:
        out = compiled(ids)
    torch.testing.assert_close(out.logits, expected.logits)
    assert counter.frame_count == 1 and again.break_count == 0
    assert out.past_key_values is not cache  # each call builds its own cache, as eager does


def test_transformers_nystromformer_matches_eager() -> None:
    """Nystromformer (landmarks fewer than tokens) adds the 4-d attention mask to its landmark
    scores, which only broadcasts when nothing builds one: transformers builds it only under
    a compiler (is_compiling() True skips its all-ones check). ember captures that call again
    with eager's answer, so the model runs as in eager (torch.compile fails on it)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.NystromformerConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        num_landmarks=4,
        segment_means_seq_len=16,
        conv_kernel_size=5,
    )
    model = transformers.NystromformerForMaskedLM(config).eval()
    ids = torch.randint(0, 100, (2, 16))
    expected = model(ids).logits
    compiled = ember_compile(model, backend=CompileCounter())
    for _ in range(2):
        torch.testing.assert_close(compiled(ids).logits, expected)
