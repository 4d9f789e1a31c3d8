"""Hand-written models: an MLP, a small CNN with BatchNorm, and a pre-norm attention block.

They need nothing but torch, so they run everywhere and isolate the basics: matmul chains,
convolution + normalization, and scaled-dot-product attention with residuals.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.models.workload import LossAdapter, ModelSpec, Workload, prepare


class MLP(nn.Module):
    """Linear-GELU stack with a classifier head."""

    def __init__(self, width: int, depth: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.GELU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class SmallCNN(nn.Module):
    """Three conv-BatchNorm-ReLU stages with pooling, then a linear classifier."""

    def __init__(self, channels: int, classes: int) -> None:
        super().__init__()
        stages: list[nn.Module] = []
        in_channels = 3
        for i in range(3):
            out_channels = channels * 2**i
            stages += [
                nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
                nn.BatchNorm2d(out_channels),
                nn.ReLU(),
                nn.MaxPool2d(2),
            ]
            in_channels = out_channels
        self.features = nn.Sequential(*stages)
        self.head = nn.Linear(in_channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


class AttentionBlock(nn.Module):
    """A pre-norm transformer block: causal multi-head attention and a GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


def _mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(output, target)


def build_mlp(size: str, mode: str, dropout: bool = False) -> Workload:
    width, depth, batch = (256, 3, 32) if size != "gpu" else (4096, 4, 512)
    model = MLP(width, depth, classes=10)
    x = torch.randn(batch, width)
    return _classifier(model, x, mode, f"MLP {depth}x{width}, batch {batch}")


def build_cnn(size: str, mode: str, dropout: bool = False) -> Workload:
    channels, image, batch = (16, 32, 8) if size != "gpu" else (64, 64, 128)
    model = SmallCNN(channels, classes=10)
    x = torch.randn(batch, 3, image, image)
    return _classifier(model, x, mode, f"CNN base {channels}ch, {image}px, batch {batch}")


def build_attention(size: str, mode: str, dropout: bool = False) -> Workload:
    width, heads, length, batch = (128, 4, 64, 4) if size != "gpu" else (1024, 16, 1024, 16)
    model = AttentionBlock(width, heads)
    x = torch.randn(batch, length, width)
    if mode == "inference":
        return Workload(prepare(model, mode), (x,), f"block d={width}, seq {length}, batch {batch}")
    target = torch.randn(batch, length, width)
    return Workload(
        prepare(LossAdapter(model, _mse), mode),
        (x, target),
        f"block d={width}, seq {length}, batch {batch}",
    )


def _classifier(model: nn.Module, x: torch.Tensor, mode: str, description: str) -> Workload:
    if mode == "inference":
        return Workload(prepare(model, mode), (x,), description)
    target = torch.randint(0, 10, (x.shape[0],))
    return Workload(prepare(LossAdapter(model, F.cross_entropy), mode), (x, target), description)


SPECS = (
    ModelSpec("mlp", "handwritten", build_mlp),
    ModelSpec("small_cnn", "handwritten", build_cnn),
    ModelSpec("attention_block", "handwritten", build_attention),
)
