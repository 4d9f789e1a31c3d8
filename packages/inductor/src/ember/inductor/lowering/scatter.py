"""Scatters. With accumulation, `prims::scatter_add` (and so scatter(reduce="add"), index_add,
index_put(accumulate=True) and embedding's backward) is a copy of the operand into a fresh
buffer, then one loop over the index that adds each source element at the index it names,
atomically (several loop points may name one element).

`prims::scatter` with one index per line along its dim (nll_loss's backward writes one value
per row of a zero matrix as wide as the vocabulary) is a pointwise select: each element takes
the source where its position along the dim is the line's index, else the operand. The zero
matrix then never exists: BERT's loss backward filled 8192 x 30522 float32 zeros, copied them
in the scatter, and read them twice. Other scatters fall back to their op.
"""

from __future__ import annotations

import sympy
import torch

from ember.inductor.ir import body
from ember.inductor.ir.indexing import index_var, same
from ember.inductor.ir.program import LoopNode
from ember.inductor.ir.tensors import Lazy, StorageView, TensorValue, lazy
from ember.inductor.lowering.graph_lowering import LoweringContext, Unlowerable, _merge
from ember.inductor.lowering.table import lowers


@lowers("prims::scatter_add")
def scatter_add(
    ctx: LoweringContext, a: TensorValue, dim: int, index: TensorValue, src: TensorValue
) -> StorageView:
    dtype = ctx.output_spec().dtype
    if dtype == torch.bool or dtype not in ctx.atomic_dtypes:
        raise Unlowerable(f"no atomic add of {dtype} in this code generator")
    # a fresh buffer even when `a` is memory already: the accumulation must not write `a`;
    # in its spec's strides (channels-last for max pooling's backward, passes/channels_last)
    target = ctx.realize(lazy(dtype, a.size, a.loader(), [a], ctx.origin()), ctx.result_layout())
    dim = dim % max(len(a.size), 1)
    variables = [index_var("x", i) for i in range(len(index.size))]
    symbol = sympy.Symbol(ctx.fresh("ind"), integer=True)
    chosen = body.to_dtype(index.loader()(variables), torch.int64)
    position = [symbol if d == dim else v for d, v in enumerate(variables)]
    sources = [value.sources for value in (index, src) if isinstance(value, Lazy)]
    ctx.program.nodes.append(
        LoopNode(
            name=ctx.fresh("scatter"),
            storage=target.storage,
            store_index=target.layout.index(position),
            ranges=tuple(index.size),
            variables=tuple(variables),
            body=body.to_dtype(src.loader()(variables), dtype),
            dtype=dtype,
            origins=(ctx.origin(),),
            sources=_merge(*sources, ctx.source()),
            store_indirect=((symbol, chosen),),
            store_mode="atomic_add",
        )
    )
    return target


@lowers("prims::scatter")
def scatter(
    ctx: LoweringContext, a: TensorValue, dim: int, index: TensorValue, src: TensorValue
) -> Lazy:
    ndim = len(a.size)
    dim = dim % max(ndim, 1)
    if (
        not ndim
        or len(index.size) != ndim
        or index.size[dim] != 1
        or not all(same(index.size[d], a.size[d]) for d in range(ndim) if d != dim)
    ):
        raise Unlowerable("a scatter of several elements per line")
    dtype = ctx.output_spec().dtype
    # the index and source hold one element per line: computed once, they keep the select
    # cheap enough to inline into every reader of the (much larger) result
    index, src = (ctx.realize(v) if isinstance(v, Lazy) else v for v in (index, src))
    load_a, load_index, load_src = a.loader(), index.loader(), src.loader()

    def fn(position: body.Index) -> body.BodyValue:
        line = [sympy.S.Zero if d == dim else p for d, p in enumerate(position)]
        chosen = body.to_dtype(load_index(line), torch.int64)
        hit = body.binary("eq", body.index_expr(position[dim], torch.int64), chosen)
        kept = body.to_dtype(load_a(position), dtype)
        return body.where(hit, body.to_dtype(load_src(line), dtype), kept)

    return lazy(dtype, a.size, fn, [a, index, src], ctx.origin())
