"""Random prims with an explicit seed and offset, and the one stateful prim that draws a seed.

`uniform` and `normal` are pure functions of (seed, offset, shape): the same arguments give
the same values within one implementation; the stream itself is implementation-defined.
`random_seed` draws a fresh seed each time it runs, from the generator of the device it is
for and on that device: a GPU graph gets its seed with no host-to-device copy, and a CUDA graph
that recorded the draw draws anew on every replay (torch's CUDA generator advances its philox
offset per replay), so replays never repeat a dropout mask.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ember.prims.primitives.prim import define

FAMILY = "random"


def _generator(seed: torch.Tensor, offset: int, device: torch.device) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed((int(seed) * 1_000_003 + offset) % (2**63))
    return generator


define(
    "random_seed",
    "(*, Device device) -> Tensor",
    lambda *, device: torch.empty((), dtype=torch.int64, device="meta"),
    lambda *, device: torch.randint(0, 2**62, (), dtype=torch.int64, device=device),
    family=FAMILY,
    doc="a 0-d int64 seed drawn on `device` from its default generator (stateful)",
)


def _sample_meta(
    shape: Sequence[int],
    a: float,
    b: float,
    seed: torch.Tensor,
    offset: int,
    *,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    if not dtype.is_floating_point:
        raise TypeError(f"random prims produce floating point, not {dtype}")
    return torch.empty(list(shape), dtype=dtype, device="meta")


def _uniform(
    shape: Sequence[int],
    low: float,
    high: float,
    seed: torch.Tensor,
    offset: int,
    *,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    generator = _generator(seed, offset, torch.device(device))
    return torch.empty(list(shape), dtype=dtype, device=device).uniform_(
        low, high, generator=generator
    )


def _normal(
    shape: Sequence[int],
    mean: float,
    std: float,
    seed: torch.Tensor,
    offset: int,
    *,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    generator = _generator(seed, offset, torch.device(device))
    return torch.empty(list(shape), dtype=dtype, device=device).normal_(
        mean, std, generator=generator
    )


define(
    "uniform",
    "(SymInt[] shape, float low, float high, Tensor seed, int offset, *, "
    "ScalarType dtype, Device device) -> Tensor",
    _sample_meta,
    _uniform,
    family=FAMILY,
    doc="samples uniform on [low, high) determined by (seed, offset)",
)
define(
    "normal",
    "(SymInt[] shape, float mean, float std, Tensor seed, int offset, *, "
    "ScalarType dtype, Device device) -> Tensor",
    _sample_meta,
    _normal,
    family=FAMILY,
    doc="samples from N(mean, std^2) determined by (seed, offset)",
)
