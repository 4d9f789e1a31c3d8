"""Scatter with accumulation: `prims::scatter_add` (and so scatter(reduce="add"), index_add,
index_put(accumulate=True) and embedding's backward) as a copy of the operand into a fresh
buffer, then one loop over the index that adds each source element at the index it names,
atomically (several loop points may name one element).
"""

from __future__ import annotations

import sympy
import torch

from ember.inductor.ir import body
from ember.inductor.ir.indexing import index_var
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
    # a fresh buffer even when `a` is memory already: the accumulation must not write `a`
    target = ctx.realize(lazy(dtype, a.size, a.loader(), [a], ctx.origin()))
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
