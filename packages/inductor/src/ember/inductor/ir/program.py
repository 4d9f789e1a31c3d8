"""The realized program lowering produces: storages, loop nodes (pointwise or reduction
bodies that store one buffer), extern calls (torch ops on realized tensors) and outputs,
in program order. The scheduler groups its loop nodes into kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy
import torch

from ember.inductor.ir.body import BodyValue, walk
from ember.inductor.ir.indexing import Expr
from ember.inductor.ir.tensors import Layout


@dataclass
class Storage:
    """Memory the program reads or writes: a graph input or a buffer it allocates."""

    name: str
    dtype: torch.dtype
    layout: Layout | None  # how a buffer is allocated; None for inputs and extern results
    is_input: bool = False
    declared: Layout | None = None  # an extern result's layout, as its op's meta says


@dataclass
class LoopNode:
    """Store `body` into `storage` at `store_index` for every point of `ranges`; a reduction
    node reduces `body` over `reduction_ranges` first (variables `x*` and `r*`).

    `store_indirect` binds symbols of `store_index` to values computed in the loop (a
    scatter's index), as a load's `indirect` does. `store_mode` None overwrites; "atomic_add"
    adds the value to what the storage holds, atomically, since several loop points may hit
    one element (scatter_add): such a node is a read-modify-write of its storage."""

    name: str
    storage: str
    store_index: Expr
    ranges: tuple[Expr, ...]
    variables: tuple[sympy.Symbol, ...]
    body: BodyValue
    dtype: torch.dtype
    origins: tuple[str, ...]
    reduction_ranges: tuple[Expr, ...] = ()
    reduction_variables: tuple[sympy.Symbol, ...] = ()
    reduction_type: str | None = None
    sources: tuple[str, ...] = ()  # the user lines it computes (`model.py:12: code`)
    store_indirect: tuple[tuple[sympy.Symbol, BodyValue], ...] = ()
    store_mode: str | None = None  # None or one of ir.ops.STORE_MODES

    def trees(self) -> list[BodyValue]:
        """The body and the values its store index reads."""
        return [self.body, *(value for _, value in self.store_indirect)]

    def reads(self) -> set[str]:
        return {
            str(value.args[0])
            for tree in self.trees()
            for value in walk(tree)
            if value.op == "load"
        }

    def writes(self) -> set[str]:
        return {self.storage}


@dataclass
class TensorArg:
    """A tensor argument of an extern call: a strided view of a storage."""

    storage: str
    layout: Layout


@dataclass
class ExternNode:
    """A call of a torch op on realized tensors (matmul, convolution, or a fallback)."""

    name: str
    target: str  # qualified op name, resolved with ember.prims.resolve_op
    args: list[object]  # literals, TensorArg, lists of them
    kwargs: dict[str, object]
    outputs: list[str | None]  # one storage per tensor output of the flat result
    reads_from: set[str]
    writes_to: set[str]  # storages the op mutates in place
    origins: tuple[str, ...]
    is_fallback: bool = False
    source: str = ""

    def reads(self) -> set[str]:
        return self.reads_from

    def writes(self) -> set[str]:
        return {*self.writes_to, *(o for o in self.outputs if o is not None)}


ProgramNode = LoopNode | ExternNode


@dataclass
class Program:
    """What the wrapper runs: inputs by position, nodes in order, outputs as views."""

    storages: dict[str, Storage] = field(default_factory=dict)
    input_storages: list[str] = field(default_factory=list)  # graph input position -> storage
    nodes: list[ProgramNode] = field(default_factory=list)
    outputs: list[object] = field(default_factory=list)  # TensorArg or literal per leaf
    size_symbols: dict[str, tuple[int, int]] = field(default_factory=dict)  # symbol -> (input, dim)
    # symbol -> (smallest, largest or None) value its range and the Graph's guards allow:
    # what a kernel may size a scratch row or choose its index type by (`largest`)
    size_ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    # output position -> the layout the wrapper copies it into (an output whose dtype the
    # kernels do not compute in, computed in other strides than its spec declares)
    output_restrides: dict[int, Layout] = field(default_factory=dict)
    # inputs and extern results read through as_strided: their memory may extend past the
    # layout they arrive with (a view of a larger tensor), so their bounds are unknown
    unbounded: set[str] = field(default_factory=set)
