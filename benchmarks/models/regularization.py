"""Dropout and stochastic depth of a suite model: all off, or all at one rate.

Training cases run a model both ways: with regularization off, its first step is compared
with eager and a float64 reference value by value; with it on (rate 0.1, as in pretraining
recipes), it is timed and its statistics are compared with eager's (benchmarks/dropout.py).
"""

from __future__ import annotations

from typing import Any

RATE = 0.1
# config fields that hold a dropout or stochastic-depth probability (layerdrop is not one:
# it skips whole layers, a control-flow change, and stays at its default of 0)
WORDS = ("dropout", "pdrop", "drop_path", "drop_connect", "drop_rate")


def regularize(config: Any, on: bool) -> Any:
    """Sets every dropout / stochastic-depth probability of a transformers config to RATE
    (`on`) or 0, and returns the config."""
    rate = RATE if on else 0.0
    for key, value in list(vars(config).items()):
        if key.startswith("_") or not any(word in key for word in WORDS):
            continue
        new: object
        if isinstance(value, float | int) and not isinstance(value, bool):
            new = rate
        elif isinstance(value, list | tuple) and all(isinstance(v, float | int) for v in value):
            new = type(value)([rate] * len(value))  # per-stage rates (CvT)
        else:
            continue
        try:
            setattr(config, key, new)
        except Exception:  # a strictly validated field typed int (LeViT's drop_path_rate)
            continue
    return config


def timm_arguments(on: bool) -> dict[str, float]:
    """`timm.create_model` keywords: classifier dropout and stochastic depth (drop path)."""
    rate = RATE if on else 0.0
    return {"drop_rate": rate, "drop_path_rate": rate}
