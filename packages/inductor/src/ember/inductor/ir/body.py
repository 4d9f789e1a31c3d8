"""Loop bodies: expression trees over symbolic loop variables, built define-by-run.

A `Loader` maps an index (one sympy expression per dimension) to a `BodyValue`; lowerings
compose loaders, so a chain of pointwise ops becomes one tree. Realizing a tensor calls its
loader once on fresh loop variables and keeps the tree: that tree is the node's loop body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import sympy
import torch

from ember.inductor.ir.ops import ALL_OPS, BOOLEAN_UNARY_OPS, COMPARISON_OPS, RANDOM_KINDS

Index = Sequence[sympy.Expr]


@dataclass(frozen=True, eq=False)
class BodyValue:
    """One op of a loop body. `args` hold BodyValues, sympy expressions and literals."""

    op: str
    args: tuple[object, ...]
    dtype: torch.dtype

    def children(self) -> Iterator[BodyValue]:
        for arg in self.args:
            if isinstance(arg, BodyValue):
                yield arg
            elif isinstance(arg, tuple):
                for item in arg:
                    if (
                        isinstance(item, tuple)
                        and len(item) == 2
                        and isinstance(item[1], BodyValue)
                    ):
                        yield item[1]


Loader = Callable[[Index], BodyValue]


def load(storage: str, index: sympy.Expr, dtype: torch.dtype,
         indirect: tuple[tuple[sympy.Symbol, BodyValue], ...] = ()) -> BodyValue:  # fmt: skip
    """Read `storage` (a buffer or input) at a flat element `index`; `indirect` binds symbols
    of the index to values computed in the body (gather, embedding)."""
    return BodyValue("load", (storage, index, indirect), dtype)


def constant(value: float | int | bool, dtype: torch.dtype) -> BodyValue:
    return BodyValue("constant", (value,), dtype)


def index_expr(expr: sympy.Expr, dtype: torch.dtype) -> BodyValue:
    return BodyValue("index_expr", (expr,), dtype)


def random(seed: BodyValue, offset: sympy.Expr, kind: str) -> BodyValue:
    """A float32 drawn by a counter-based generator (Philox-4x32-10 in C++): a pure function
    of the int64 `seed` value and the int64 `offset` expression, so equal arguments give equal
    numbers in every kernel. `kind`: "uniform" on [0, 1) or "normal" (mean 0, std 1)."""
    assert kind in RANDOM_KINDS, kind
    return BodyValue("random", (to_dtype(seed, torch.int64), offset, kind), torch.float32)


def to_dtype(value: BodyValue, dtype: torch.dtype) -> BodyValue:
    if value.dtype == dtype:
        return value
    return BodyValue("to_dtype", (value, dtype), dtype)


def where(condition: BodyValue, a: BodyValue, b: BodyValue) -> BodyValue:
    return BodyValue("where", (condition, a, b), a.dtype)


def masked(mask: BodyValue, value: BodyValue, other: float | int | bool) -> BodyValue:
    """`value` where `mask` holds, else `other`; `value`'s loads run only where it holds."""
    return BodyValue("masked", (mask, value, other), value.dtype)


def unary(op: str, value: BodyValue) -> BodyValue:
    assert op in ALL_OPS, op
    dtype = torch.bool if op in BOOLEAN_UNARY_OPS else value.dtype
    return BodyValue(op, (value,), dtype)


def binary(op: str, a: BodyValue, b: BodyValue, dtype: torch.dtype | None = None) -> BodyValue:
    """`a op b`, both of one dtype; comparisons give bool."""
    assert op in ALL_OPS, op
    if dtype is None:
        dtype = torch.bool if op in COMPARISON_OPS else a.dtype
    return BodyValue(op, (a, b), dtype)


def walk(root: BodyValue) -> Iterator[BodyValue]:
    """Every value of a tree once (by identity), children before parents."""
    seen: set[int] = set()
    stack: list[tuple[BodyValue, bool]] = [(root, False)]
    while stack:
        value, expanded = stack.pop()
        if id(value) in seen:
            continue
        if expanded:
            seen.add(id(value))
            yield value
            continue
        stack.append((value, True))
        stack.extend((child, False) for child in value.children())


def loads(root: BodyValue) -> list[BodyValue]:
    return [value for value in walk(root) if value.op == "load"]


def size(root: BodyValue) -> int:
    return sum(1 for _ in walk(root))


def substitute(root: BodyValue, mapping: dict[sympy.Symbol, sympy.Expr]) -> BodyValue:
    """The tree with loop variables replaced (used when a node joins a kernel's loops)."""
    return map_indices(root, lambda e: sympy.expand(e.xreplace(mapping)))


def map_indices(root: BodyValue, fn: Callable[[sympy.Expr], sympy.Expr]) -> BodyValue:
    """The tree with `fn` applied to every index expression."""
    return rebuild_tree(root, index=fn)


def rebuild_tree(
    root: BodyValue,
    *,
    index: Callable[[sympy.Expr], sympy.Expr] | None = None,
    finish: Callable[[BodyValue, list[object]], None] | None = None,
) -> BodyValue:
    """The tree rebuilt bottom-up, shared values once: `index` maps every index expression,
    `finish(value, args)` may edit a value's rebuilt arguments in place before it is made."""
    memo: dict[int, BodyValue] = {}

    def visit(value: BodyValue) -> BodyValue:
        done = memo.get(id(value))
        if done is not None:
            return done
        args: list[object] = []
        for arg in value.args:
            if isinstance(arg, BodyValue):
                args.append(visit(arg))
            elif index is not None and isinstance(arg, sympy.Expr):
                args.append(index(arg))
            elif isinstance(arg, tuple) and value.op == "load":
                args.append(tuple((symbol, visit(item)) for symbol, item in arg))
            else:
                args.append(arg)
        if finish is not None:
            finish(value, args)
        result = BodyValue(value.op, tuple(args), value.dtype)
        memo[id(value)] = result
        return result

    return visit(root)
