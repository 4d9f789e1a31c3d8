"""timm image models with random weights (`pretrained=False`), used only where timm imports.

On the CPU machine timm does not import beside the torch CPU build; the runner then records
these models as not available instead of failing. Sizes: `gpu` is the architecture at its
full depth and batch; `medium` (the GPU correctness suite) is the same architecture at its
native resolution with fewer blocks where timm takes the depth as an argument, batch 4;
`small` is a smaller sibling (or the medium model) at batch 2.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.models.regularization import RATE
from benchmarks.models.workload import LossAdapter, ModelSpec, Workload, prepare

CLASSES = 100
MEDIUM_BATCH = 4


@dataclass(frozen=True)
class TimmRow:
    """One timm model: its architectures by size, depth overrides, and the regularization
    keywords its constructor takes (dropout before the classifier, stochastic depth)."""

    name: str
    architecture: str  # gpu and medium
    small_architecture: str
    gpu_batch: int = 32
    medium: dict[str, Any] = field(default_factory=dict)  # create_model keywords at medium
    regularization: tuple[str, ...] = ("drop_rate", "drop_path_rate")
    description: str = ""


ROWS = (
    TimmRow("timm_resnet50", "resnet50", "resnet18", medium={"layers": (1, 1, 2, 1)}),
    TimmRow("timm_efficientnet_b0", "efficientnet_b0", "efficientnet_b0"),
    TimmRow("timm_vit_small", "vit_small_patch16_224", "vit_tiny_patch16_224",
            medium={"depth": 2}),
    TimmRow("timm_swin_tiny", "swin_tiny_patch4_window7_224", "swin_tiny_patch4_window7_224",
            medium={"depths": (1, 1, 2, 1)}, description="Swin-T (shifted windows)"),
    TimmRow("timm_mixer_s16", "mixer_s16_224", "mixer_s16_224", description="MLP-Mixer S/16"),
    TimmRow("timm_resmlp_12", "resmlp_12_224", "resmlp_12_224", description="ResMLP-12 (affine)"),
    TimmRow("timm_densenet121", "densenet121", "densenet121",
            medium={"block_config": (2, 4, 6, 4)}, regularization=("drop_rate",),
            description="DenseNet (dense connections)"),
    TimmRow("timm_resnext50", "resnext50_32x4d", "resnext50_32x4d",
            medium={"layers": (1, 1, 2, 1)}, description="ResNeXt (grouped convs)"),
    TimmRow("timm_mobilenetv3", "mobilenetv3_large_100", "mobilenetv3_small_050",
            description="MobileNetV3 (depthwise, squeeze-excite, hard-swish)"),
    TimmRow("timm_regnety_008", "regnety_008", "regnety_002",
            description="RegNetY (grouped convs, squeeze-excite)"),
    TimmRow("timm_ghostnet", "ghostnet_100", "ghostnet_100", regularization=("drop_rate",),
            description="GhostNet (ghost modules, squeeze-excite)"),
    TimmRow("timm_cait", "cait_xxs24_224", "cait_xxs24_224", medium={"depth": 2},
            description="CaiT (class attention, talking heads)"),
    TimmRow("timm_twins_svt", "twins_svt_small", "twins_svt_small",
            medium={"depths": (1, 1, 2, 1)}, description="Twins-SVT (local windows + global)"),
    TimmRow("timm_eva02_tiny", "eva02_tiny_patch14_224", "eva02_tiny_patch14_224",
            medium={"depth": 2}, description="EVA-02 (rotary ViT, SwiGLU)"),
)  # fmt: skip


def _builder(row: TimmRow) -> Callable[[str, str, bool], Workload]:
    def build(size: str, mode: str, dropout: bool) -> Workload:
        timm = importlib.import_module("timm")  # imported here: it is optional
        architecture = row.small_architecture if size == "small" else row.architecture
        batch = {"small": 2, "medium": MEDIUM_BATCH}.get(size, row.gpu_batch)
        keywords = dict(row.medium) if size != "gpu" else {}
        keywords.update({name: RATE if dropout else 0.0 for name in row.regularization})
        model = timm.create_model(architecture, pretrained=False, num_classes=CLASSES, **keywords)
        config = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", {})
        image = int(config.get("input_size", (3, 224, 224))[-1])
        pixels = torch.randn(batch, 3, image, image)
        description = f"timm {architecture}, {image} px, batch {batch}"
        if row.description:
            description = f"{row.description}: {description}"
        if mode == "inference":
            return Workload(prepare(model, mode), (pixels,), description)
        target = torch.randint(0, CLASSES, (batch,))
        adapter = LossAdapter(model, F.cross_entropy)
        return Workload(prepare(adapter, mode), (pixels, target), description)

    return build


SPECS = tuple(
    ModelSpec(row.name, "timm", _builder(row), requires="timm", dropout=True) for row in ROWS
)
