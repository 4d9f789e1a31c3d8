"""What a benchmark model hands the runner: a module, its example inputs, and how it was sized.

A workload's module takes positional tensors and returns one tensor: the logits (inference)
or a scalar loss (training). Hugging Face models are wrapped so that both hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

MODES = ("inference", "training")
SIZES = ("small", "medium", "gpu")  # CPU / GPU correctness suite / GPU speed suite


@dataclass
class Workload:
    """A module ready to run: `module(*inputs)` returns logits or, in training, a scalar loss."""

    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    description: str


@dataclass(frozen=True)
class ModelSpec:
    """One model of the suite; `build(size, mode, dropout)` makes a fresh workload on CPU.

    `dropout` asks for the model's regularization (dropout, stochastic depth) on; `dropout`
    on the spec says the model has any, so that a training case also runs with it on. A
    builder without a distinct `medium` size builds its `small` one there."""

    name: str
    suite: str
    build: Callable[[str, str, bool], Workload]
    requires: str | None = None  # a module that must import, e.g. "timm"
    dropout: bool = False  # has dropout or stochastic depth that training turns on


class KeywordAdapter(nn.Module):
    """Calls a Hugging Face model with keyword tensors and returns `.logits` or `.loss`."""

    def __init__(self, model: nn.Module, input_names: tuple[str, ...], output: str) -> None:
        super().__init__()
        self.model = model
        self.input_names = input_names
        self.output = output

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        result = self.model(**dict(zip(self.input_names, inputs)))
        return getattr(result, self.output)


class LossAdapter(nn.Module):
    """Adds a loss to a module that returns logits: `forward(*inputs, target) -> scalar`."""

    def __init__(self, model: nn.Module, loss: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        *features, target = inputs
        return self.loss(self.model(*features), target)


def prepare(module: nn.Module, mode: str) -> nn.Module:
    """Puts a module in eval (inference) or train (training) mode."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    return module.train(mode == "training")
