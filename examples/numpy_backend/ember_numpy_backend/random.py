"""Kernels of the RNG prims: a seed from NumPy's global generator, and samples that are a pure
function of (seed, offset) through a counter-based Philox generator. The stream differs from
torch's: random ops match eager in distribution, not in values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_numpy_backend.kernels import kernel

Array = Any  # numpy.ndarray


def _generator(seed: Array, offset: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=int(seed), counter=[offset, 0, 0, 0]))


@kernel("random_seed")
def _random_seed(*, device: Any) -> Array:
    return np.asarray(np.random.randint(0, 2**62, dtype=np.int64))


@kernel("uniform")
def _uniform(
    shape: list[int],
    low: float,
    high: float,
    seed: Array,
    offset: int,
    *,
    dtype: np.dtype[Any],
    device: Any,
) -> Array:
    return _generator(seed, offset).uniform(low, high, shape).astype(dtype)


@kernel("normal")
def _normal(
    shape: list[int],
    mean: float,
    std: float,
    seed: Array,
    offset: int,
    *,
    dtype: np.dtype[Any],
    device: Any,
) -> Array:
    return _generator(seed, offset).normal(mean, std, shape).astype(dtype)
