"""Random weights that exercise the model: zero matrices and near-zero BatchNorm scales fixed."""

from __future__ import annotations

import torch
from torch import nn

from benchmarks.models.initialization import calibrate_batch_norm, randomize_zero_matrices


def _deep_batch_norm_net() -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(12):
        norm = nn.BatchNorm2d(8)
        nn.init.normal_(norm.weight, std=0.02)  # as transformers' EfficientNet draws them
        layers += [nn.Conv2d(8, 8, 3, padding=1), norm, nn.SiLU()]
    head = nn.Linear(8, 4)
    nn.init.zeros_(head.weight)  # as timm's MLP-Mixer head
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), head)


def test_outputs_are_not_degenerate_after_the_fixes() -> None:
    torch.manual_seed(0)
    model = _deep_batch_norm_net().eval()
    x = torch.randn(4, 8, 16, 16)
    with torch.no_grad():
        # degenerate: the same output for every input, so any compiler would "pass" it
        assert model(x).std(dim=0).max() < 1e-6
    randomize_zero_matrices(model)
    calibrate_batch_norm(model, (x,))
    assert not model.training
    with torch.no_grad():
        assert model(x).std(dim=0).min() > 1e-3
    assert model[1].momentum == 0.1  # restored after the calibration pass
