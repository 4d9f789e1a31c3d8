"""Lowerings that choose where to read or write: gather (indirect loads), cat and pad
(masked loads), and copy_to (a store into existing memory, the one write prims have).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch

from ember.inductor.ir import body
from ember.inductor.ir.indexing import Expr, as_expr, product
from ember.inductor.ir.tensors import Lazy, StorageView, TensorValue, lazy
from ember.inductor.lowering.graph_lowering import (
    LoweringContext,
    Unlowerable,
    _Restart,
    broadcast_loader,
)
from ember.inductor.lowering.realization_rules import REALIZE_SHARED_COST
from ember.inductor.lowering.table import lowers
from ember.prims import Ref


@lowers("prims::gather")
def gather(ctx: LoweringContext, a: TensorValue, dim: int, index: TensorValue) -> Lazy:
    dim = dim % max(len(a.size), 1)
    load_index = index.loader()
    symbol = sympy.Symbol(ctx.fresh("ind"), integer=True)
    if isinstance(a, Lazy) and a.realized is None and _gathers_inline(a, index, dim, symbol):
        # the gathered elements are computed where they are read (nll_loss picks one
        # log-probability per row: the 8192 x 32000 float32 log-softmax is never stored)
        load_a = a.loader()

        def gathered(position: body.Index) -> body.BodyValue:
            chosen = body.to_dtype(load_index(position), torch.int64)
            full = [symbol if d == dim else i for d, i in enumerate(position)]
            return _bind_indirect(load_a(full), symbol, chosen)

        return lazy(a.dtype, index.size, gathered, [a, index], ctx.origin())
    source = ctx.realize(a) if isinstance(a, Lazy) else a
    layout = source.layout

    def fn(position: body.Index) -> body.BodyValue:
        chosen = body.to_dtype(load_index(position), torch.int64)
        full = [symbol if d == dim else i for d, i in enumerate(position)]
        return body.load(source.storage, layout.index(full), source.dtype, ((symbol, chosen),))

    return lazy(source.dtype, index.size, fn, [source, index], ctx.origin())


def _gathers_inline(a: Lazy, index: TensorValue, dim: int, symbol: sympy.Symbol) -> bool:
    """Whether a gather reads lazy `a` by computing its elements in place: it reads no more
    elements than `a` has, `a` is cheap to compute, and only loads use the gathered
    position (an index_expr or a random offset over it would need the value as an index)."""
    if a.cost > REALIZE_SHARED_COST or not a.size:
        return False
    if not sympy.simplify(product(index.size) - product(a.size)).is_nonpositive:
        return False
    probe = [symbol if d == dim else sympy.Symbol(f"probe{d}") for d in range(len(a.size))]
    for value in body.walk(a.loader()(probe)):
        if value.op in ("index_expr", "random"):
            expr = value.args[0] if value.op == "index_expr" else value.args[1]
            if isinstance(expr, sympy.Expr) and symbol in expr.free_symbols:
                return False
    return True


def _bind_indirect(
    tree: body.BodyValue, symbol: sympy.Symbol, chosen: body.BodyValue
) -> body.BodyValue:
    """`tree` with every load whose index reads `symbol` binding it to `chosen`."""

    def bind(value: body.BodyValue, args: list[object]) -> None:
        if value.op != "load":
            return
        index, bound = value.args[1], args[2]
        if isinstance(index, sympy.Expr) and symbol in index.free_symbols:
            assert isinstance(bound, tuple)
            args[2] = (*bound, (symbol, chosen))

    return body.rebuild_tree(tree, finish=bind)


def _between(i: Expr, low: Expr | None, high: Expr | None) -> body.BodyValue | None:
    conditions: list[body.BodyValue] = []
    position = body.index_expr(i, torch.int64)
    if low is not None:
        conditions.append(body.binary("ge", position, body.index_expr(low, torch.int64)))
    if high is not None:
        conditions.append(body.binary("lt", position, body.index_expr(high, torch.int64)))
    if not conditions:
        return None
    mask = conditions[0]
    for condition in conditions[1:]:
        mask = body.binary("logical_and", mask, condition)
    return mask


@lowers("prims::cat")
def cat(ctx: LoweringContext, tensors: Sequence[TensorValue], dim: int) -> Lazy:
    spec = ctx.output_spec()
    size = tuple(as_expr(s) for s in spec.shape)
    dim = dim % len(size)
    parts = [t for t in tensors if not (len(t.size) == 1 and t.size[0] == 0 and len(size) > 1)]
    starts: list[Expr] = []
    running: Expr = sympy.S.Zero
    for part in parts:
        starts.append(running)
        running = running + part.size[dim]
    loaders = [part.loader() for part in parts]

    def fn(index: body.Index) -> body.BodyValue:
        result: body.BodyValue | None = None
        for k in reversed(range(len(parts))):
            shifted = [i - starts[k] if d == dim else i for d, i in enumerate(index)]
            value = body.to_dtype(loaders[k](shifted), spec.dtype)
            low = starts[k] if k > 0 else None
            high = starts[k] + parts[k].size[dim] if k < len(parts) - 1 else None
            mask = _between(index[dim], low, high)
            if mask is None:
                return value
            guarded = body.masked(mask, value, False if spec.dtype == torch.bool else 0)
            result = guarded if result is None else body.where(mask, guarded, result)
        assert result is not None
        return result

    return lazy(spec.dtype, size, fn, parts, ctx.origin())


@lowers("prims::pad")
def pad(
    ctx: LoweringContext,
    a: TensorValue,
    value: Any,
    low: Sequence[Any],
    high: Sequence[Any],
    interior: Sequence[Any],
) -> Lazy:
    if any(as_expr(i) != 0 for i in interior):
        raise Unlowerable("interior padding")
    spec = ctx.output_spec()
    size = tuple(as_expr(s) for s in spec.shape)
    lows = [as_expr(v) for v in low]
    load = a.loader()
    fill: Any = bool(value) if spec.dtype == torch.bool else (
        float(value) if spec.dtype.is_floating_point else int(value)
    )  # fmt: skip

    def fn(index: body.Index) -> body.BodyValue:
        shifted = [i - lo for i, lo in zip(index, lows)]
        mask: body.BodyValue | None = None
        for d, s in enumerate(shifted):
            if lows[d] == 0 and size[d] - lows[d] == a.size[d]:
                continue
            condition = _between(s, sympy.S.Zero, a.size[d])
            assert condition is not None
            mask = condition if mask is None else body.binary("logical_and", mask, condition)
        element = body.to_dtype(load(shifted), spec.dtype)
        return element if mask is None else body.masked(mask, element, fill)

    return lazy(spec.dtype, size, fn, [a], ctx.origin())


@lowers("prims::copy_to")
def copy_to(ctx: LoweringContext, dst: TensorValue, src: TensorValue) -> TensorValue:
    if isinstance(dst, Lazy) and dst.realized is not None:
        dst = dst.realized
    if isinstance(dst, StorageView):
        ctx.store(dst, src)
        return dst
    assert ctx.node is not None
    argument = ctx.node.args[0]
    if dst.family.viewed:
        raise _Restart(dst.family.root or "")
    # nothing else sees this lazy value's memory: the write is a rebinding
    load = broadcast_loader(src, dst.size)
    dtype = dst.dtype
    result = lazy(
        dtype, dst.size, lambda index: body.to_dtype(load(index), dtype), [src], ctx.origin()
    )
    if isinstance(argument, Ref):
        ctx.env[argument.name] = result
    return result
