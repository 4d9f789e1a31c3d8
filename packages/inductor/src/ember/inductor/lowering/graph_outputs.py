"""A lowered Graph's outputs: each realized in the layout eager gives it (its spec before
decomposition when the caller has it: later Graphs, such as a backward reading what its forward
saved, are compiled against those strides), copied into those strides when it was computed in
others, and handed to the Program."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import sympy

from ember.inductor.ir.indexing import same
from ember.inductor.ir.program import Program, TensorArg
from ember.inductor.ir.tensors import Layout, StorageView, TensorValue, copy_of
from ember.inductor.lowering.layout_geometry import dense, spec_layout
from ember.prims import Graph, Ref, TensorSpec

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import LoweringContext


def lower_outputs(
    ctx: LoweringContext, graph: Graph, output_specs: Sequence[TensorSpec | None] | None
) -> None:
    """Append `graph`'s outputs to `ctx.program.outputs`, tensors realized in their layouts."""
    program = ctx.program
    for position, leaf in enumerate(graph.output_leaves):
        if isinstance(leaf, Ref):
            value = ctx.env[leaf.name]
            if isinstance(value, TensorValue):
                wanted = output_layout(ctx, leaf.name, position, output_specs)
                view = ctx.realize(value, wanted)
                if wanted is not None and restrided_copy_needed(program, view, wanted):
                    if view.dtype in ctx.dtypes and dense(wanted):
                        view = ctx.realize(copy_of(view), wanted)
                    else:
                        program.output_restrides[len(program.outputs)] = wanted
                elif wanted is not None and not program.storages[view.storage].is_input:
                    # same elements: take the declared strides of size-1 dims too (a 1x1
                    # weight's gradient from a channels-last convolution)
                    view = StorageView(view.storage, size_one_strides(view.layout, wanted))
                program.outputs.append(TensorArg(view.storage, view.layout))
                continue
            program.outputs.append(value)
        else:
            program.outputs.append(leaf)


def output_layout(
    ctx: LoweringContext,
    name: str,
    position: int,
    output_specs: Sequence[TensorSpec | None] | None,
) -> Layout | None:
    """The layout an output must have: its spec before decomposition when one is given
    (and still describes this value), else its spec in the Graph being lowered."""
    spec = output_specs[position] if output_specs is not None else None
    layout = ctx.spec_layout(name)
    if spec is None or layout is None:
        return layout
    wanted = spec_layout(spec)
    if wanted.dtype != layout.dtype or len(wanted.size) != len(layout.size):
        return layout
    if not all(same(a, b) for a, b in zip(wanted.size, layout.size)):
        return layout
    return wanted


def restrided_copy_needed(program: Program, view: StorageView, wanted: Layout) -> bool:
    """Whether an output computed into a buffer of other strides must be copied into the
    strides its spec declares. Inputs and their views are never copied (an output aliasing
    an input must stay an alias); a size-1 dimension's stride does not matter."""
    if program.storages[view.storage].is_input:
        return False
    return any(
        not same(have, want)
        for have, want, size in zip(view.layout.stride, wanted.stride, wanted.size)
        if not same(size, sympy.S.One)
    )


def size_one_strides(layout: Layout, wanted: Layout) -> Layout:
    """`layout` with `wanted`'s strides in its size-1 dims (which address nothing)."""
    if len(layout.stride) != len(wanted.stride):
        return layout
    stride = tuple(
        want if same(size, sympy.S.One) else have
        for have, want, size in zip(layout.stride, wanted.stride, layout.size)
    )
    return Layout(layout.dtype, layout.size, stride, layout.offset)
