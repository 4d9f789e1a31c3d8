"""The tensors lowering passes around: a `StorageView` (a strided view of memory that exists:
an input or a realized buffer) or a `Lazy` tensor (an index function not yet computed,
inlined into whatever reads it). Views of either are index functions; no copy is made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import sympy
import torch

from ember.inductor.ir import body
from ember.inductor.ir.body import BodyValue, Index, Loader
from ember.inductor.ir.indexing import Expr, contiguous_strides, flat_index


@dataclass(frozen=True)
class Layout:
    """Where a tensor's elements live in its storage: sizes, strides and offset (elements)."""

    dtype: torch.dtype
    size: tuple[Expr, ...]
    stride: tuple[Expr, ...]
    offset: Expr = sympy.S.Zero

    @staticmethod
    def contiguous(dtype: torch.dtype, size: Sequence[Expr]) -> Layout:
        return Layout(dtype, tuple(size), contiguous_strides(size))

    def index(self, index: Index) -> Expr:
        return flat_index(index, self.stride, self.offset)

    def is_contiguous(self) -> bool:
        return self.offset == 0 and all(
            a == b or n == 1
            for a, b, n in zip(self.stride, contiguous_strides(self.size), self.size)
        )


@dataclass
class StorageView:
    """A view of a storage that exists when the kernels run."""

    storage: str
    layout: Layout

    @property
    def dtype(self) -> torch.dtype:
        return self.layout.dtype

    @property
    def size(self) -> tuple[Expr, ...]:
        return self.layout.size

    @property
    def reads(self) -> frozenset[str]:
        return frozenset({self.storage})

    def loader(self) -> Loader:
        storage, layout = self.storage, self.layout
        return lambda index: body.load(storage, layout.index(index), layout.dtype)


@dataclass
class ViewFamily:
    """A lazy tensor and its lazy views: whether views were taken, and the root's name."""

    viewed: bool = False
    root: str | None = None


@dataclass
class Lazy:
    """A tensor defined by an index function; `reads` names the storages it loads."""

    dtype: torch.dtype
    size: tuple[Expr, ...]
    fn: Loader
    reads: frozenset[str]
    origins: tuple[str, ...] = ()
    family: ViewFamily = field(default_factory=ViewFamily)  # shared with its views
    cost: int = 1  # ops in the tree when fully inlined (recomputation is bounded by it)
    realized: StorageView | None = None  # set once computed into a buffer
    sources: tuple[str, ...] = ()  # the user lines it computes, for comments in kernels
    # a view of a lazy value: that value, and the layout the view takes over its memory
    view: tuple[Lazy, Relayout] | None = None

    def loader(self) -> Loader:
        return self.realized.loader() if self.realized is not None else self.fn

    def current_reads(self) -> frozenset[str]:
        return self.realized.reads if self.realized is not None else self.reads


TensorValue = StorageView | Lazy
# A view's layout over memory holding its base (None: no strided layout expresses it).
Relayout = Callable[[StorageView], "Layout | None"]


def loader_of(value: TensorValue) -> Loader:
    return value.loader()


def lazy(dtype: torch.dtype, size: Sequence[Expr], fn: Loader, inputs: Sequence[TensorValue],
         origin: str) -> Lazy:  # fmt: skip
    """A Lazy computed from `inputs` (for its reads and the ops it holds)."""
    reads: frozenset[str] = frozenset().union(
        *(v.current_reads() if isinstance(v, Lazy) else v.reads for v in inputs)
    )
    origins: tuple[str, ...] = tuple(
        dict.fromkeys(
            [o for value in inputs if isinstance(value, Lazy) for o in value.origins] + [origin]
        )
    )
    cost = 1 + sum(value.cost if isinstance(value, Lazy) and value.realized is None else 1
                   for value in inputs)  # fmt: skip
    return Lazy(dtype, tuple(size), fn, reads, origins, cost=cost)


def copy_of(value: StorageView, origin: str = "output") -> Lazy:
    """A Lazy reading every element of `value`: realized, a copy in the layout asked for."""
    return Lazy(value.dtype, value.size, value.loader(), value.reads, (origin,))


def view_of(value: TensorValue, size: Sequence[Expr], fn: Loader) -> Lazy:
    """A lazy view: an index function over `value`; marks `value` as viewed."""
    if isinstance(value, Lazy):
        if value.realized is None:
            value.family.viewed = True
            family = value.family
        else:
            family = ViewFamily()
        reads = value.current_reads()
        return Lazy(value.dtype, tuple(size), fn, reads, value.origins, family,
                    cost=value.cost + 1)  # fmt: skip
    return Lazy(value.dtype, tuple(size), fn, value.reads, (), cost=2)


def trace(
    fn: Loader, size: Sequence[Expr], prefix: str = "x"
) -> tuple[list[sympy.Symbol], BodyValue]:
    """Run an index function on fresh loop variables: the loop body of a node."""
    from ember.inductor.ir.indexing import index_var

    variables = [index_var(prefix, i) for i in range(len(size))]
    return variables, fn(variables)


__all__ = ["BodyValue", "Layout", "Lazy", "StorageView", "TensorValue"]
