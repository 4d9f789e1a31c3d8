"""ATen random ops written with the RNG prims: every sample draws a fresh seed with
`random_seed` and samples with `uniform`/`normal` at offset 0. Values follow ember's stream,
not torch's: only distributions (not exact values) match eager.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.operands import broadcast, broadcast_shapes, expand_to, scalar_like
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


def _transformed(a: torch.Tensor, fn: Any) -> torch.Tensor:
    """Samples shaped like a: fn applied to unit-uniform samples (inverse-CDF sampling)."""
    samples = uniform(list(a.shape), 0.0, 1.0, torch.float64, a.device)
    return prims.convert_element_type(fn(samples), a.dtype)


def _in_place(sample: Any) -> Any:
    def decomposition(a: torch.Tensor, *args: Any, generator: Any = None) -> torch.Tensor:
        return prims.copy_to(a, sample(a, *args))

    return decomposition


def _exponential(a: torch.Tensor, lambd: float = 1.0) -> torch.Tensor:
    # -log(1 - u) / lambda
    return _transformed(
        a,
        lambda u: prims.div(prims.neg(prims.log1p(prims.neg(u))), scalar_like(float(lambd), u)),
    )


def _cauchy(a: torch.Tensor, median: float = 0.0, sigma: float = 1.0) -> torch.Tensor:
    # median + sigma * tan(pi * (u - 1/2))
    def fn(u: torch.Tensor) -> torch.Tensor:
        angle = prims.mul(prims.sub(u, scalar_like(0.5, u)), scalar_like(math.pi, u))
        return prims.add(
            scalar_like(float(median), u), prims.mul(scalar_like(float(sigma), u), prims.tan(angle))
        )

    return _transformed(a, fn)


def _geometric(a: torch.Tensor, p: float) -> torch.Tensor:
    # ceil(log(1 - u) / log(1 - p)): trials until the first success, at least 1
    def fn(u: torch.Tensor) -> torch.Tensor:
        trials = prims.div(prims.log1p(prims.neg(u)), scalar_like(math.log1p(-p), u))
        return prims.maximum(prims.ceil(trials), scalar_like(1.0, u))

    return _transformed(a, fn)


def _log_normal(a: torch.Tensor, mean: float = 1.0, std: float = 2.0) -> torch.Tensor:
    return prims.exp(normal(list(a.shape), mean, std, a.dtype, a.device))


to_prims("aten::exponential_.default")(_in_place(_exponential))
to_prims("aten::exponential.default")(
    lambda a, lambd=1.0, *, generator=None: _exponential(a, lambd)
)
to_prims("aten::cauchy_.default")(_in_place(_cauchy))
to_prims("aten::cauchy.default")(
    lambda a, median=0.0, sigma=1.0, *, generator=None: _cauchy(a, median, sigma)
)
to_prims("aten::geometric_.default")(_in_place(_geometric))
to_prims("aten::geometric.default")(lambda a, p, *, generator=None: _geometric(a, p))
to_prims("aten::log_normal_.default")(_in_place(_log_normal))
to_prims("aten::log_normal.default")(
    lambda a, mean=1.0, std=2.0, *, generator=None: _log_normal(a, mean, std)
)


def _normal_of(mean: Any, std: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """mean + std * N(0, 1), broadcast over the tensor operands."""
    shape = broadcast_shapes(*(x.shape for x in (mean, std) if isinstance(x, torch.Tensor)))
    unit = normal(shape, 0.0, 1.0, dtype, device)
    location, scale = broadcast(mean, std, dtype=dtype)
    if list(location.shape) != shape:
        location, scale = (expand_to(x, shape, dtype, device) for x in (location, scale))
    return prims.add(location, prims.mul(scale, unit))


@to_prims("aten::normal.Tensor_Tensor", "aten::normal.Tensor_float", "aten::normal.float_Tensor")
def _normal_tensors(mean: Any, std: Any = 1.0, *, generator: Any = None) -> torch.Tensor:
    like = mean if isinstance(mean, torch.Tensor) else std
    return _normal_of(mean, std, like.dtype, like.device)


@to_prims("aten::normal.float_float")
def _normal_floats(
    mean: float,
    std: float,
    size: Sequence[int],
    *,
    generator: Any = None,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    place = torch.device(device) if device is not None else torch.device("cpu")
    return normal(list(size), mean, std, dtype or torch.get_default_dtype(), place)


def _randint_values(
    shape: list[int], low: int, high: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    # floor(low + u * (high - low)) with u in [0, 1), computed in float64
    samples = uniform(shape, float(low), float(high), torch.float64, device)
    return prims.convert_element_type(prims.floor(samples), dtype)


@to_prims("aten::randint.default", "aten::randint.low")
def _randint(*args: Any, **kwargs: Any) -> torch.Tensor:
    low, high, size = (0, *args[:2]) if len(args) == 2 else args[:3]
    dtype = kwargs.get("dtype") or torch.int64
    device = torch.device(kwargs["device"]) if kwargs.get("device") else torch.device("cpu")
    return _randint_values(list(size), low, high, dtype, device)


@to_prims("aten::randint_like.default", "aten::randint_like.low_dtype")
def _randint_like(a: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    low, high = (0, args[0]) if len(args) == 1 else args[:2]
    dtype = kwargs.get("dtype") or a.dtype
    device = torch.device(kwargs["device"]) if kwargs.get("device") else a.device
    return _randint_values(list(a.shape), low, high, dtype, device)
