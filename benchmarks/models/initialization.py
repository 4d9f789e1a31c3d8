"""Random weights that exercise the whole model, not a constant: fixes applied after a build.

Three things make a randomly initialized model's output degenerate, so that any compiler
"passes" it: a classifier initialized to zero (timm's MLP-Mixer family), BatchNorm scales
drawn near zero (transformers' EfficientNet initializes them like linear weights: 16 blocks
later the activations are 1e-30), and, in eval mode, running statistics still at mean 0 and
variance 1. Zero matrices get small random values, BatchNorm scales and shifts PyTorch's
default (1 and 0), and the running statistics are set from one pass over the workload's own
inputs (a cumulative average, as after calibration), then eval mode returns.
"""

from __future__ import annotations

import torch
from torch import nn

STD = 0.02


def randomize_zero_matrices(module: nn.Module) -> None:
    """Gives every all-zero weight matrix or kernel small random values, and every BatchNorm
    PyTorch's default scale and shift."""
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.dim() >= 2 and not parameter.any():
                parameter.normal_(0.0, STD)
        for norm in module.modules():
            if isinstance(norm, nn.modules.batchnorm._BatchNorm) and norm.affine:
                nn.init.ones_(norm.weight)
                nn.init.zeros_(norm.bias)


def calibrate_batch_norm(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    """Sets BatchNorm running statistics from one forward pass over `inputs` (eval mode after)."""
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    momenta = [norm.momentum for norm in norms]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: one pass sets the batch's statistics
    was_training = module.training
    module.train()
    with torch.no_grad():
        module(*inputs)
    for norm, momentum in zip(norms, momenta, strict=True):
        norm.momentum = momentum
    module.train(was_training)
