"""The benchmark model suite: hand-written, Hugging Face and timm models, looked up by name."""

from __future__ import annotations

import importlib

import torch

from benchmarks.models.handwritten import SPECS as HANDWRITTEN
from benchmarks.models.huggingface import SPECS as HUGGINGFACE
from benchmarks.models.initialization import calibrate_batch_norm, randomize_zero_matrices
from benchmarks.models.timm_models import SPECS as TIMM
from benchmarks.models.transformers_zoo import SPECS as TRANSFORMERS_ZOO
from benchmarks.models.workload import MODES, SIZES, ModelSpec, Workload

__all__ = ["MODES", "SIZES", "SUITE", "ModelSpec", "Workload", "build_workload", "missing", "spec"]

SUITE: tuple[ModelSpec, ...] = HANDWRITTEN + HUGGINGFACE + TRANSFORMERS_ZOO + TIMM


def spec(name: str) -> ModelSpec:
    """The suite entry called `name`."""
    for entry in SUITE:
        if entry.name == name:
            return entry
    raise KeyError(f"no benchmark model {name!r}; known: {', '.join(s.name for s in SUITE)}")


def missing(entry: ModelSpec) -> str | None:
    """Why `entry` cannot be built here (its required package does not import), or None."""
    if entry.requires is None:
        return None
    try:
        importlib.import_module(entry.requires)
    except Exception as error:  # any import failure means "not available"
        return f"{entry.requires} does not import: {type(error).__name__}: {error}"
    return None


def build_workload(
    entry: ModelSpec, size: str, mode: str, seed: int = 0, dropout: bool = False
) -> Workload:
    """A fresh workload on CPU, seeded so that every build has the same weights and inputs
    (with dropout on or off: regularization adds no parameters)."""
    torch.manual_seed(seed)
    workload = entry.build(size, mode, dropout)
    randomize_zero_matrices(workload.module)
    if mode == "inference":
        calibrate_batch_norm(workload.module, workload.inputs)
    return workload
