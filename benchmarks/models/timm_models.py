"""timm image models with random weights (`pretrained=False`), used only where timm imports.

On the CPU machine timm does not import beside the torch CPU build; the runner then records
these models as not available instead of failing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.models.workload import LossAdapter, ModelSpec, Workload, prepare

# name -> (timm architecture at GPU size, timm architecture at small size, GPU batch)
ARCHITECTURES = {
    "timm_resnet50": ("resnet50", "resnet18", 32),
    "timm_efficientnet_b0": ("efficientnet_b0", "efficientnet_b0", 32),
    "timm_vit_small": ("vit_small_patch16_224", "vit_tiny_patch16_224", 32),
}


def _builder(name: str) -> Callable[[str, str], Workload]:
    gpu_architecture, small_architecture, gpu_batch = ARCHITECTURES[name]

    def build(size: str, mode: str) -> Workload:
        timm = importlib.import_module("timm")  # imported here: it is optional
        architecture = small_architecture if size == "small" else gpu_architecture
        batch = 2 if size == "small" else gpu_batch
        model = timm.create_model(architecture, pretrained=False, num_classes=100, drop_rate=0.0)
        config = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", {})
        image = int(config.get("input_size", (3, 224, 224))[-1])
        pixels = torch.randn(batch, 3, image, image)
        description = f"timm {architecture}, batch {batch}"
        if mode == "inference":
            return Workload(prepare(model, mode), (pixels,), description)
        target = torch.randint(0, 100, (batch,))
        adapter = LossAdapter(model, F.cross_entropy)
        return Workload(prepare(adapter, mode), (pixels, target), description)

    return build


SPECS = tuple(ModelSpec(name, "timm", _builder(name), requires="timm") for name in ARCHITECTURES)
