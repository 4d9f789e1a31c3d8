"""Random numbers: `prims::random_seed` stays a call of the op (it draws on the device the
kernels run on, from that device's generator: no host copy, and a fresh seed on every CUDA graph
replay), and `prims::uniform`/`prims::normal` become lazy tensors whose element at flat
position i is the IR's `random(seed, offset + i, kind)`, scaled and shifted: a pure function
of the seed tensor, so any kernel that recomputes an element (a dropout mask in the backward)
draws the same number. The stream is ember's (Philox), not eager torch's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch

from ember.inductor.ir import body
from ember.inductor.ir.indexing import as_expr, contiguous_strides, flat_index
from ember.inductor.ir.tensors import Lazy, TensorValue, lazy
from ember.inductor.lowering.graph_lowering import LoweringContext, Unlowerable
from ember.inductor.lowering.table import lowers


@lowers("prims::random_seed")
def random_seed(ctx: LoweringContext, **kwargs: Any) -> list[Any]:
    # the seed is read by kernels: draw it where they run. A host tensor's sample in a GPU
    # graph (OPT's and BART's LayerDrop: `torch.rand([])`) drew a CPU seed that the Triton
    # kernel computing the sample could not read (KernelDeviceError)
    kwargs = {**kwargs, "device": ctx.compute_device}
    return ctx.extern("prims::random_seed", [], kwargs, is_fallback=False)


def _sample(
    ctx: LoweringContext, kind: str, seed: TensorValue, offset: Any, shift: float, scale: float
) -> Lazy:
    """`shift + scale * random(seed, offset + flat position, kind)` over the output's shape."""
    spec = ctx.output_spec()
    if spec.dtype != torch.float32:
        # the IR draws float32; a float64 sample would have only 24 random bits
        raise Unlowerable(f"{spec.dtype} samples")
    size = tuple(as_expr(s) for s in spec.shape)
    strides = contiguous_strides(size)
    start = as_expr(offset)
    load_seed = seed.loader()
    seed_index = [sympy.S.Zero] * len(seed.size)

    def fn(index: body.Index) -> body.BodyValue:
        value = body.random(load_seed(seed_index), flat_index(index, strides, start), kind)
        if scale != 1.0:
            value = body.binary("mul", value, body.constant(scale, torch.float32))
        if shift != 0.0:
            value = body.binary("add", value, body.constant(shift, torch.float32))
        return value

    return lazy(torch.float32, size, fn, [seed], ctx.origin())


@lowers("prims::uniform")
def uniform(
    ctx: LoweringContext,
    shape: Sequence[Any],
    low: float,
    high: float,
    seed: TensorValue,
    offset: Any,
    **_: Any,
) -> Lazy:
    return _sample(ctx, "uniform", seed, offset, float(low), float(high) - float(low))


@lowers("prims::normal")
def normal(
    ctx: LoweringContext,
    shape: Sequence[Any],
    mean: float,
    std: float,
    seed: TensorValue,
    offset: Any,
    **_: Any,
) -> Lazy:
    return _sample(ctx, "normal", seed, offset, float(mean), float(std))
