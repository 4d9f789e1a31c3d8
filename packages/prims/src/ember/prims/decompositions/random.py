"""ATen random ops written with the RNG prims: every sample draws a fresh seed with
`random_seed` and samples with `uniform`/`normal` at offset 0. Values follow ember's stream,
not torch's: only distributions (not exact values) match eager.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.operands import scalar_like
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims


def uniform(
    shape: Sequence[int], low: float, high: float, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    seed = prims.random_seed(device=device)
    return prims.uniform(list(shape), low, high, seed, 0, dtype=dtype, device=device)


def normal(
    shape: Sequence[int], mean: float, std: float, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    seed = prims.random_seed(device=device)
    return prims.normal(list(shape), mean, std, seed, 0, dtype=dtype, device=device)


def bernoulli_mask(a: torch.Tensor, p: Any) -> torch.Tensor:
    """A bool tensor shaped like a, true with probability p."""
    samples = uniform(list(a.shape), 0.0, 1.0, torch.float32, a.device)
    probability = p if isinstance(p, torch.Tensor) else scalar_like(float(p), samples)
    if isinstance(p, torch.Tensor):
        probability = (
            prims.convert_element_type(p, torch.float32) if p.dtype != torch.float32 else p
        )
        if list(probability.shape) != list(a.shape):
            probability = prims.broadcast_in_dim(
                probability, list(a.shape), list(range(a.dim() - probability.dim(), a.dim()))
            )
    return prims.lt(samples, probability)


@to_prims("aten::bernoulli.p")
def _bernoulli_p(a: torch.Tensor, p: float = 0.5, *, generator: Any = None) -> torch.Tensor:
    return prims.convert_element_type(bernoulli_mask(a, p), a.dtype)


@to_prims("aten::bernoulli.default")
def _bernoulli(a: torch.Tensor, *, generator: Any = None) -> torch.Tensor:
    return prims.convert_element_type(bernoulli_mask(a, a), a.dtype)


@to_prims("aten::bernoulli_.float", "aten::bernoulli_.Tensor")
def _bernoulli_(a: torch.Tensor, p: Any = 0.5, *, generator: Any = None) -> torch.Tensor:
    return prims.copy_to(a, prims.convert_element_type(bernoulli_mask(a, p), a.dtype))


@to_prims("aten::native_dropout.default")
def _native_dropout(
    a: torch.Tensor, p: float, train: bool | None
) -> tuple[torch.Tensor, torch.Tensor]:
    if not train or p == 0:
        return prims.clone(a), prims.full(list(a.shape), True, dtype=torch.bool, device=a.device)
    keep = bernoulli_mask(a, 1 - p)
    scale = scalar_like(1 / (1 - p) if p < 1 else 0.0, a)
    return prims.mul(prims.mul(prims.convert_element_type(keep, a.dtype), a), scale), keep


@to_prims("aten::native_dropout_backward.default")
def _native_dropout_backward(grad: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    return prims.mul(
        prims.mul(grad, prims.convert_element_type(mask, grad.dtype)), scalar_like(scale, grad)
    )


@to_prims("aten::uniform_.default")
def _uniform_(
    a: torch.Tensor, low: float = 0.0, high: float = 1.0, *, generator: Any = None
) -> torch.Tensor:
    return prims.copy_to(a, uniform(list(a.shape), low, high, a.dtype, a.device))


@to_prims("aten::uniform.default")
def _uniform(
    a: torch.Tensor, low: float = 0.0, high: float = 1.0, *, generator: Any = None
) -> torch.Tensor:
    return uniform(list(a.shape), low, high, a.dtype, a.device)


@to_prims("aten::normal_.default")
def _normal_(
    a: torch.Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Any = None
) -> torch.Tensor:
    return prims.copy_to(a, normal(list(a.shape), mean, std, a.dtype, a.device))


def _factory(sample: Any) -> Any:
    def decomposition(
        size: Sequence[int],
        *,
        generator: Any = None,
        dtype: Any = None,
        layout: Any = None,
        device: Any = None,
        pin_memory: Any = None,
    ) -> torch.Tensor:
        return sample(
            list(size),
            dtype or torch.get_default_dtype(),
            torch.device(device) if device is not None else torch.device("cpu"),
        )

    return decomposition


def _like(sample: Any) -> Any:
    def decomposition(
        a: torch.Tensor,
        *,
        dtype: Any = None,
        layout: Any = None,
        device: Any = None,
        pin_memory: Any = None,
        memory_format: Any = None,
    ) -> torch.Tensor:
        return sample(
            list(a.shape),
            dtype or a.dtype,
            torch.device(device) if device is not None else a.device,
        )

    return decomposition


def _unit_uniform(shape: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return uniform(shape, 0.0, 1.0, dtype, device)


def _unit_normal(shape: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return normal(shape, 0.0, 1.0, dtype, device)


to_prims("aten::rand.default")(_factory(_unit_uniform))
to_prims("aten::randn.default")(_factory(_unit_normal))
to_prims("aten::rand_like.default")(_like(_unit_uniform))
to_prims("aten::randn_like.default")(_like(_unit_normal))
