"""The reference models: small, seeded by the caller, covering the ops real models use
(linear, convolution, BatchNorm with buffer updates, LayerNorm, GELU, SDPA, views)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class MLP(nn.Module):
    """Two linear layers with a ReLU: 16 -> 32 -> 4."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(16, 32)
        self.l2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x)))


class SmallCNN(nn.Module):
    """Convolution, BatchNorm (running statistics update in train mode), ReLU, pooling, head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.mean(dim=(2, 3)))


class AttentionBlock(nn.Module):
    """A pre-norm transformer block: LayerNorm, causal multi-head attention, GELU MLP."""

    def __init__(self, dim: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (
            t.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v)
        )
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, seq, dim))
        return x + self.mlp(self.norm2(x))


def example_input(model: nn.Module, batch: int = 2) -> torch.Tensor:
    """A random input of the shape the reference `model` takes, with `batch` rows."""
    if isinstance(model, MLP):
        return torch.randn(batch, 16)
    if isinstance(model, SmallCNN):
        return torch.randn(batch, 3, 8, 8)
    if isinstance(model, AttentionBlock):
        return torch.randn(batch, 6, model.qkv.in_features)
    raise TypeError(f"{type(model).__name__} is not one of the reference models")
