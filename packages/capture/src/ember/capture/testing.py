"""Test helpers for capture: `CompileCounter`, a backend that counts the graphs it gets,
`TinyDecoder`, a GPT-2-style decoder whose prompt length varies (dynamic-shape tests), and
`ConfigWritingClassifier`, which writes its config on its first call as transformers'
classification loss does (cache-order tests)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ember.capture.backends.eager import eager
from ember.prims import Graph


class CompileCounter:
    """A backend that runs Graphs eagerly and remembers each one (`frame_count`, `graphs`)."""

    def __init__(self) -> None:
        self.graphs: list[Graph] = []

    @property
    def frame_count(self) -> int:
        return len(self.graphs)

    @property
    def op_count(self) -> int:
        return sum(len(graph.nodes) for graph in self.graphs)

    def __call__(self, graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        graph.verify()
        self.graphs.append(graph)
        return eager(graph, example_inputs)

    def clear(self) -> None:
        self.graphs.clear()


class CausalAttention(nn.Module):
    """Multi-head causal self-attention masked by a slice of a `context`-square buffer."""

    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.register_buffer("mask", torch.tril(torch.ones(context, context)).bool())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        head = width // self.heads
        q, k, v = (t.view(batch, length, self.heads, head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(head)
        mask: torch.Tensor = self.mask  # type: ignore[assignment]  # a buffer
        scores = scores.masked_fill(~mask[:length, :length], float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).contiguous().view(batch, length, width))


class TinyDecoder(nn.Module):
    """A GPT-2-style decoder: token and position embeddings, pre-norm blocks, tied head."""

    def __init__(
        self, vocab: int = 50, width: int = 32, heads: int = 4, depth: int = 2, context: int = 64
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList([DecoderBlock(width, heads, context) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class DecoderBlock(nn.Module):
    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalAttention(width, heads, context)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ClassifierConfig:
    problem_type: str | None = None


class ConfigWritingClassifier(nn.Module):
    """Writes its config on the first call, as transformers' classification loss does: the
    second call recompiles, and the first entry's guards fail from then on."""

    def __init__(self) -> None:
        super().__init__()
        self.config = ClassifierConfig()
        self.linear = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.config.problem_type is None:
            self.config.problem_type = "single_label_classification"
        if self.config.problem_type == "single_label_classification":
            return self.linear(x).log_softmax(-1)
        return self.linear(x)
