"""Walk a Graph node by node and lower it into a `Program`.

Pointwise ops and views stay `Lazy` (inlined into their readers); a value is realized into a
buffer when something needs memory (a reduction's result, an extern call's argument, a graph
output, a value read by many with a large body). Writes (`prims::copy_to`, fallbacks that
mutate) first realize every pending lazy reader of the written storage, so reads and writes
keep program order. Ops without a lowering become fallback calls of the op itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from ember.inductor.errors import InductorError
from ember.inductor.ir import body
from ember.inductor.ir.indexing import Expr, as_expr, index_var, product, same
from ember.inductor.ir.program import ExternNode, LoopNode, Program, Storage, TensorArg
from ember.inductor.ir.tensors import (
    Layout,
    Lazy,
    Relayout,
    StorageView,
    TensorValue,
    copy_of,
    lazy,
)
from ember.inductor.lowering.argument_aliasing import aliased_argument, mutated_positions
from ember.inductor.lowering.argument_layouts import (
    checked_argument,
    non_overlapping,
    relaid,
    repeated_once,
    same_strides,
)
from ember.inductor.lowering.graph_outputs import lower_outputs
from ember.inductor.lowering.layout_geometry import dense, extent, same_elements, spec_layout
from ember.inductor.lowering.realization_rules import store_if_needed, trace_body
from ember.inductor.lowering.split_reduction import Split, plan_split, reads_along_outputs
from ember.inductor.lowering.table import LOWERINGS
from ember.prims import Graph, Node, Ref, TensorSpec, Value, resolve_op
from ember.prims.logs import topic_logger
from ember.prims.ops import op_schema

perf_hints = topic_logger("perf_hints")
logger = logging.getLogger("ember.inductor")

# dtypes the loop-level IR computes in; ops touching others fall back to their ATen call.
SUPPORTED_DTYPES = frozenset(
    {torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
     torch.uint8, torch.bool}
)  # fmt: skip


class Unlowerable(Exception):
    """A lowering declines a node (unsupported argument); the node falls back to its op."""


class _Restart(Exception):
    """A lazy value that has views is written in place: lower again, realizing it early."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass
class LoweringContext:
    """The state of one lowering: the Program being built and the value of every name."""

    graph: Graph
    program: Program = field(default_factory=Program)
    env: dict[str, Any] = field(default_factory=dict)
    uses_left: dict[str, int] = field(default_factory=dict)
    readers: dict[str, list[Node]] = field(default_factory=dict)  # the nodes reading a value
    force_realize: set[str] = field(default_factory=set)
    node: Node | None = None
    counter: int = 0
    # references the node being lowered makes, by name (its own reads are not "later")
    reading_now: dict[str, int] = field(default_factory=dict)
    dtypes: frozenset[torch.dtype] = SUPPORTED_DTYPES
    atomic_dtypes: frozenset[torch.dtype] = SUPPORTED_DTYPES
    # reductions with few outputs over many elements run as two (GPUs: see split_reduction)
    split_reductions: bool = False
    # variances as welford_m2 reductions (code generators that have it: Triton)
    welford_reductions: bool = False
    # 16-bit 1x1 convolutions over channels-last maps as matrix multiplies
    # (`pointwise_convolutions.py`)
    pointwise_convolutions: bool = False
    # where the kernels run: the first non-CPU device of the Graph's tensors, else the CPU
    compute_device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    # ---- names and buffers --------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def origin(self) -> str:
        if self.node is None:
            return "output"
        return self.node.target.split("::")[-1].split(".")[0]

    def source(self) -> tuple[str, ...]:
        """The current node's user line, as kernels quote it."""
        where = self.node.source if self.node is not None else None
        return (f"{where.short()}: {where.code.strip()}",) if where is not None else ()

    def new_buffer(self, layout: Layout) -> str:
        name = self.fresh("buf")
        self.program.storages[name] = Storage(name, layout.dtype, layout)
        return name

    # ---- realization -----------------------------------------------------------------------

    def realize(self, value: TensorValue, layout: Layout | None = None) -> StorageView:
        """The value computed into memory (a no-op for a storage view)."""
        if isinstance(value, StorageView):
            return value
        if value.realized is not None:
            return value.realized
        if value.view is not None:
            shared = self._realize_view(value, layout)
            if shared is not None:
                return shared
        if layout is None:
            layout = Layout.contiguous(value.dtype, value.size)
        if dense(layout):
            storage = self.new_buffer(layout)
        else:
            # a layout with gaps or an offset (an output whose spec later graphs compile
            # against): allocate the memory it spans and write through the layout
            storage = self.new_buffer(Layout.contiguous(layout.dtype, (extent(layout),)))
        variables, tree = trace_body(value.fn, value.size, "x")
        self.program.nodes.append(
            LoopNode(
                name=storage,
                storage=storage,
                store_index=layout.index(variables),
                ranges=tuple(value.size),
                variables=tuple(variables),
                body=tree,
                dtype=value.dtype,
                origins=value.origins or (self.origin(),),
                sources=_merge(value.sources, self.source()),
            )
        )
        value.realized = StorageView(storage, layout)
        return value.realized

    def _realize_view(self, value: Lazy, layout: Layout | None) -> StorageView | None:
        """A view of a lazy value realized as a view of its base's memory, when it takes the
        wanted strides there (`layout`, else row-major): one buffer holds both. A backward's
        gradient and its transpose, the arguments of the two matmuls that read it, were
        written twice (Llama's MLP: 46 MB twice a layer). The base may be several views
        down (an attention bias expanded from a slice of its padded buffer: eager's
        strides are the padded buffer's); the farthest base that gives the wanted strides
        is realized."""
        wanted = layout or Layout.contiguous(value.dtype, value.size)
        chain: list[Relayout] = []
        bases: list[tuple[Lazy, tuple[Relayout, ...]]] = []
        link: Lazy = value
        while link.view is not None:
            base, relayout = link.view
            chain.insert(0, relayout)
            bases.insert(0, (base, tuple(chain)))
            if base.realized is not None:
                break
            link = base
        for base, relayouts in bases:  # the farthest base first
            if base.realized is None:
                planned = relaid(StorageView("", Layout.contiguous(base.dtype, base.size)),
                                  relayouts)  # fmt: skip
                if planned is None or not same_elements(planned, wanted):
                    continue
            memory = self.realize(base)
            final = relaid(memory, relayouts)
            if final is None or not same_elements(final, wanted):
                continue  # a base realized earlier in other strides: a nearer one may do
            value.realized = StorageView(memory.storage, final)
            return value.realized
        return None

    def reduction(
        self,
        fn: body.Loader,
        ranges: Sequence[Expr],
        reduction_ranges: Sequence[Expr],
        reduction_type: str,
        dtype: torch.dtype,
        origins: tuple[str, ...],
        sources: tuple[str, ...] = (),
    ) -> StorageView:
        """A reduction node: `fn(x + r)` reduced over `r` for every `x`; its buffer's view.
        With `split_reductions`, one with few outputs over many elements is computed as
        partial reductions and a reduction of those (see `split_reduction`)."""
        xs = [index_var("x", i) for i in range(len(ranges))]
        rs = [index_var("r", i) for i in range(len(reduction_ranges))]
        tree = fn([*xs, *rs])
        split = None
        if self.split_reductions:
            column = reads_along_outputs(
                tree,
                [x for x, size in zip(xs, ranges) if size != 1],
                [r for r, size in zip(rs, reduction_ranges) if size != 1],
                dict(zip([*xs, *rs], [*ranges, *reduction_ranges])),
            )
            split = plan_split(ranges, reduction_ranges, reduction_type, column)
        if split is not None:
            self.split_reductions = False  # the two halves are reductions of their own
            try:
                split_into = (
                    self._split_welford if reduction_type == "welford_m2" else self._split_reduction
                )
                return split_into(split, fn, ranges, reduction_type, dtype, (origins, sources))
            finally:
                self.split_reductions = True
        layout = self.reduction_layout(dtype, tuple(ranges))
        storage = self.new_buffer(layout)
        self.program.nodes.append(
            LoopNode(
                name=storage,
                storage=storage,
                store_index=layout.index(xs),
                ranges=tuple(ranges),
                variables=tuple(xs),
                body=tree,
                dtype=dtype,
                origins=(*origins, self.origin()),
                sources=_merge(sources, self.source()),
                reduction_ranges=tuple(reduction_ranges),
                reduction_variables=tuple(rs),
                reduction_type=reduction_type,
            )
        )
        return StorageView(storage, layout)

    def result_layout(self) -> Layout | None:
        """The dense layout the current node's one result declares, if any."""
        values = list(self.node.output_values()) if self.node is not None else []
        if len(values) != 1 or not isinstance(values[0].spec, TensorSpec):
            return None
        layout = spec_layout(values[0].spec)
        return layout if dense(layout) else None

    def reduction_layout(self, dtype: torch.dtype, size: tuple[Expr, ...]) -> Layout:
        """A reduction result's layout: its spec's when that is dense and describes this
        result (a channels-last pooling window, `passes/channels_last.py`), else row-major."""
        values = list(self.node.output_values()) if self.node is not None else []
        if len(values) == 1 and isinstance(values[0].spec, TensorSpec):
            layout = spec_layout(values[0].spec)
            if (
                layout.dtype == dtype
                and len(layout.size) == len(size)
                and all(same(a, b) for a, b in zip(layout.size, size))
                and dense(layout)
            ):
                return layout
        return Layout.contiguous(dtype, size)

    def _split_reduction(
        self,
        split: Split,
        fn: body.Loader,
        ranges: Sequence[Expr],
        reduction_type: str,
        dtype: torch.dtype,
        provenance: tuple[tuple[str, ...], tuple[str, ...]],
    ) -> StorageView:
        """`fn` reduced as `split` says: partials over `split.inner` for each output and
        `split.outer` index (laid out `[*outer, *outputs]` when `split.chunk_major`, else
        `[*outputs, *outer]`), then the partials reduced over `split.outer`. `provenance`:
        the reduction's (origins, sources)."""
        origins, sources = provenance
        kept = len(ranges)
        extra = len(split.outer)
        # partials in float32 at least: a bf16 sum of 12 544 elements would round each step
        partial_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        major = split.chunk_major

        def partial(index: body.Index) -> body.BodyValue:
            outputs = index[extra : extra + kept] if major else index[:kept]
            outer = index[:extra] if major else index[kept : kept + extra]
            inner = index[kept + extra :]
            value = fn([*outputs, *split.index(outer, inner)])
            return body.to_dtype(value, partial_dtype)

        partial_ranges = [*split.outer, *ranges] if major else [*ranges, *split.outer]
        partials = self.reduction(
            partial, partial_ranges, split.inner, reduction_type, partial_dtype, origins, sources
        )
        load = partials.loader()

        def combine(index: body.Index) -> body.BodyValue:
            # index: the outputs, then the split dims
            return body.to_dtype(load([*index[kept:], *index[:kept]] if major else index), dtype)

        return self.reduction(combine, ranges, split.outer, reduction_type, dtype, origins, sources)

    def _split_welford(
        self,
        split: Split,
        fn: body.Loader,
        ranges: Sequence[Expr],
        reduction_type: str,
        dtype: torch.dtype,
        provenance: tuple[tuple[str, ...], tuple[str, ...]],
    ) -> StorageView:
        """A welford_m2 reduction split as `split` says: each chunk's squared deviations and
        sum, then Chan's merge, `M2 = sum(M2_c) + sum((S_c - S / C)^2) / m` over the `C`
        chunks of `m` elements. The second term, over a few hundred partials, is float64
        shifted sums (the first chunk's sum as the shift): their cancellation grows with the
        chunks' count, not with the data's offset."""
        origins, sources = provenance
        kept, extra, major = len(ranges), len(split.outer), split.chunk_major

        def partial(index: body.Index) -> body.BodyValue:
            outputs = index[extra : extra + kept] if major else index[:kept]
            outer = index[:extra] if major else index[kept : kept + extra]
            return body.to_dtype(fn([*outputs, *split.index(outer, index[kept + extra :])]), dtype)

        partial_ranges = [*split.outer, *ranges] if major else [*ranges, *split.outer]
        within = self.reduction(
            partial, partial_ranges, split.inner, reduction_type, dtype, origins, sources
        )
        sums = self.reduction(partial, partial_ranges, split.inner, "sum", dtype, origins, sources)
        wide = torch.float64
        load_within, load_sums = within.loader(), sums.loader()

        def at(index: body.Index) -> list[Expr]:  # the outputs, then the split dims
            return [*index[kept:], *index[:kept]] if major else list(index)

        def shifted(index: body.Index) -> body.BodyValue:
            first = [*index[:kept], *([sympy.S.Zero] * extra)]
            value = body.to_dtype(load_sums(at(index)), wide)
            return body.binary("sub", value, body.to_dtype(load_sums(at(first)), wide))

        def squared(index: body.Index) -> body.BodyValue:
            deviation = shifted(index)
            return body.binary("mul", deviation, deviation)

        def merged(index: body.Index) -> body.BodyValue:
            return body.to_dtype(load_within(at(index)), wide)

        outer = list(split.outer)
        views = [
            self.reduction(part, ranges, outer, "sum", wide, origins, sources)
            for part in (merged, shifted, squared)
        ]
        parts = [view.loader() for view in views]
        chunks, count = product(outer), product(list(split.inner))

        def combine(index: body.Index) -> body.BodyValue:
            within_m2, total, squares = (load(index) for load in parts)
            mean_square = body.binary("div", body.binary("mul", total, total),
                                      body.index_expr(chunks, wide))  # fmt: skip
            between = body.binary("sub", squares, mean_square)
            zero = body.constant(0.0, wide)
            between = body.where(body.binary("lt", between, zero), zero, between)
            between = body.binary("div", between, body.index_expr(count, wide))
            return body.to_dtype(body.binary("add", within_m2, between), dtype)

        result = lazy(dtype, list(ranges), combine, views, self.origin())
        result.sources = sources
        return self.realize(result, self.reduction_layout(dtype, tuple(ranges)))

    # ---- writes ------------------------------------------------------------------------------

    def before_write(self, storage: str) -> None:
        """Compute every pending lazy value that reads `storage` (and is read later)."""
        for name, value in list(self.env.items()):
            if (
                isinstance(value, Lazy)
                and value.realized is None
                and storage in value.reads
                and self.uses_left.get(name, 0) > self.reading_now.get(name, 0)
            ):
                self.realize(value, self.spec_layout(name))

    def store(self, destination: StorageView, source: TensorValue) -> None:
        """Write `source` (broadcast to its shape, cast to its dtype) into `destination`."""
        self.before_write(destination.storage)
        size = destination.size
        variables = [index_var("x", i) for i in range(len(size))]
        store_index = destination.layout.index(variables)
        load_source = broadcast_loader(source, size)
        tree = body.to_dtype(load_source(variables), destination.dtype)
        clashing = [
            value
            for value in body.loads(tree)
            if value.args[0] == destination.storage
            and sympy.expand(value.args[1] - store_index) != 0
        ]
        if clashing:  # the source reads other elements of what it overwrites: copy first
            source = self.realize(source) if isinstance(source, Lazy) else _copy(self, source)
            tree = body.to_dtype(broadcast_loader(source, size)(variables), destination.dtype)
        self.program.nodes.append(
            LoopNode(
                name=self.fresh("store"),
                storage=destination.storage,
                store_index=store_index,
                ranges=tuple(size),
                variables=tuple(variables),
                body=tree,
                dtype=destination.dtype,
                origins=(self.origin(),),
                sources=_merge(source.sources if isinstance(source, Lazy) else (), self.source()),
            )
        )

    # ---- extern calls -----------------------------------------------------------------------

    def extern(
        self,
        target: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        is_fallback: bool,
        exact: Sequence[int | str] = (),
    ) -> list[Any]:
        """Call `target` on realized arguments; returns the current node's outputs' values.
        Lazy arguments are computed in the strides the Graph declares for them (eager's,
        `argument_layouts.py`); the arguments at `exact` (positions and names: those the op
        checks, an attention bias) are copied into them if an earlier realization chose
        others."""
        node = self.node
        assert node is not None
        reads: set[str] = set()
        writes: set[str] = set()
        schema = op_schema(target)
        mutated = mutated_positions(schema)

        def as_arg(value: Any, position: int | str | None) -> Any:
            declared = self._declared_layout(node, position, value)
            checked = checked_argument(exact, position, schema)
            if isinstance(value, Lazy):
                if position in mutated and value.family.viewed and value.realized is None:
                    raise _Restart(value.family.root or "")
                value = self._realize_argument(value, declared, checked)
            if (
                isinstance(value, StorageView)
                and declared is not None
                and checked
                and not same_strides(value.layout, declared)
            ):
                value = self._realize_argument(copy_of(value, self.origin()), declared, True)
            if isinstance(value, StorageView):
                reads.add(value.storage)
                if position in mutated:
                    self.before_write(value.storage)
                    writes.add(value.storage)
                return TensorArg(value.storage, value.layout)
            if isinstance(value, (list, tuple)):
                return [as_arg(item, position) for item in value]
            return value

        call_args = [as_arg(a, i) for i, a in enumerate(args)]
        call_kwargs = {k: as_arg(v, k) for k, v in kwargs.items()}
        results: list[Any] = []
        storages: list[str | None] = []
        for position, output in enumerate(node.outputs):
            aliased = aliased_argument(schema, position)
            if aliased is not None and isinstance(output, Value):
                source = args[aliased] if isinstance(aliased, int) else kwargs[aliased]
                view = source.realized if isinstance(source, Lazy) else source
                if isinstance(view, StorageView) and isinstance(output.spec, TensorSpec):
                    symbolic = bool(self.graph.symbols)
                    view = _viewed_in_place(target, view, output.spec, symbolic)
                results.append(view)
                storages.append(None)
                continue
            outputs = output if isinstance(output, list) else [output]
            values: list[Any] = []
            for value in outputs:
                if value is None or not isinstance(value.spec, TensorSpec):
                    storages.append(None)
                    values.append(None)
                    continue
                name = self.fresh("buf")
                layout = spec_layout(value.spec, relative=True)
                self.program.storages[name] = Storage(name, layout.dtype, None, declared=layout)
                storages.append(name)
                values.append(StorageView(name, layout))
            results.append(values if isinstance(output, list) else values[0])
        source = node.source.short() if node.source is not None else ""
        self.program.nodes.append(
            ExternNode(
                name=self.fresh("extern"),
                target=target,
                args=call_args,
                kwargs=call_kwargs,
                outputs=storages,
                reads_from=reads,
                writes_to=writes,
                origins=(self.origin(),),
                is_fallback=is_fallback,
                source=source,
            )
        )
        return results

    def operand(self, value: TensorValue, position: int) -> StorageView:
        """The current node's tensor argument at `position` in memory, as `extern` would pass
        it: a lazy value computed in the layout the Graph declares for it when that is dense."""
        if isinstance(value, StorageView):
            return value
        node = self.node
        assert node is not None
        return self._realize_argument(value, self._declared_layout(node, position, value), False)

    def product(self, target: str, args: Sequence[Any], result: Layout) -> StorageView:
        """A call of `target` (a matrix multiply) on views of storages (`TensorArg`s) and
        literals, whose one result is a fresh tensor the op returns in `result`'s (contiguous)
        layout; the current node's output is whatever view of it the caller makes."""
        reads = {arg.storage for arg in args if isinstance(arg, TensorArg)}
        name = self.fresh("buf")
        self.program.storages[name] = Storage(name, result.dtype, None, declared=result)
        node = self.node
        self.program.nodes.append(
            ExternNode(
                name=self.fresh("extern"),
                target=target,
                args=list(args),
                kwargs={},
                outputs=[name],
                reads_from=reads,
                writes_to=set(),
                origins=(self.origin(),),
                source=node.source.short() if node is not None and node.source else "",
            )
        )
        return StorageView(name, result)

    def _declared_layout(self, node: Node, position: int | str | None, value: Any) -> Layout | None:
        """The layout the Graph declares for an extern op's tensor argument (eager's strides),
        when it describes `value`: a weight cast then transposed for a matmul stays row-major
        and is passed transposed, as eager does, instead of being written out transposed
        (misaligned rows make cuBLAS pick slow kernels, and the cast itself would read across
        rows); a padded attention bias keeps its padded strides."""
        if not isinstance(value, (Lazy, StorageView)):
            return None
        if isinstance(position, int):
            ref = node.args[position] if position < len(node.args) else None
        else:
            ref = node.kwargs.get(position) if position is not None else None
        if not isinstance(ref, Ref):
            return None
        layout = self.spec_layout(ref.name)
        if layout is None or layout.dtype != value.dtype or len(layout.size) != len(value.size):
            return None
        if not all(same(a, b) for a, b in zip(layout.size, value.size)):
            return None
        return layout

    def _realize_argument(self, value: Lazy, declared: Layout | None, checked: bool) -> StorageView:
        """An extern argument computed in its declared layout when it is dense. An argument
        the op checks (`checked`: an attention bias) is computed in it with gaps too, as it
        is (a view of its base's memory where the Graph's views lead there), and one that
        repeats elements as a view of its base's memory, else computed once along the
        repeated dims and viewed with stride 0. Anything else (or no declared layout) is
        row-major: an unchecked slice computed in its base's strides wrote the whole base
        (a matmul reading 10 of a lazy 64x1000 value's columns stored all 64x1000)."""
        if declared is None:
            return self.realize(value)
        if dense(declared):
            return self.realize(value, declared)
        if not checked:
            return self.realize(value)
        if non_overlapping(declared):
            return self.realize(value, declared)
        if value.realized is not None:
            return value.realized
        if value.view is not None:
            shared = self._realize_view(value, declared)
            if shared is not None:
                return shared
        once = repeated_once(declared)
        if once is None:
            return self.realize(value)
        load = value.loader()
        computed = self.realize(Lazy(value.dtype, once.size, load, value.current_reads(),
                                     value.origins, cost=value.cost), once)  # fmt: skip
        value.realized = StorageView(
            computed.storage,
            Layout(declared.dtype, declared.size, declared.stride, computed.layout.offset),
        )
        return value.realized

    # ---- specs -------------------------------------------------------------------------------

    def spec_layout(self, name: str) -> Layout | None:
        value = self.graph_values.get(name)
        if value is None or not isinstance(value.spec, TensorSpec):
            return None
        return spec_layout(value.spec)

    @property
    def graph_values(self) -> dict[str, Value]:
        cached: dict[str, Value] | None = getattr(self, "_values", None)
        if cached is None:
            cached = self.graph.values()
            self._values = cached
        return cached

    def output_spec(self, position: int = 0) -> TensorSpec:
        assert self.node is not None
        output = self.node.outputs[position]
        assert isinstance(output, Value) and isinstance(output.spec, TensorSpec)
        return output.spec


# In-place view ops that may move a tensor's first element or its storage: a Graph that
# keeps them as extern calls (symbolic sizes, not decomposed) cannot know where it points.
_MOVING_VIEWS = ("aten::as_strided_", "aten::resize_", "aten::resize_as_", "aten::set_")


def _viewed_in_place(
    target: str, view: StorageView, spec: TensorSpec, symbolic: bool
) -> StorageView:
    """The value an extern in-place op returns (its argument, aliased). An op that changes
    its argument's sizes and strides in place (`squeeze_`, `unsqueeze_`, `t_`: ATen's
    `inplace_view` tag) returns it with the sizes and strides its spec says, at the same
    first element; any other returns it as it was. One that may move the first element or
    the storage is refused in a Graph with symbolic sizes (a visible error, not wrong values)."""
    if torch.Tag.inplace_view not in getattr(resolve_op(target), "tags", ()):
        return view
    if target.startswith(_MOVING_VIEWS):
        if not symbolic:
            return view  # a static Graph: as planned (OpInfo's resize_as_ passes)
        raise InductorError(
            f"{target} changes where a tensor points in place, which this Graph keeps as an "
            "extern call (symbolic sizes): compile it with dynamic=False, or use the "
            "out-of-place op"
        )
    moved = spec_layout(spec)
    return StorageView(
        view.storage, Layout(view.layout.dtype, moved.size, moved.stride, view.layout.offset)
    )


def storage_offset(ctx: LoweringContext, argument: object) -> Expr:
    """The storage offset the traced spec of a node argument declares (0 if unknown)."""
    if isinstance(argument, Ref):
        value = ctx.graph_values.get(argument.name)
        if value is not None and isinstance(value.spec, TensorSpec):
            return as_expr(value.spec.storage_offset)
    return sympy.S.Zero


def compute_device(graph: Graph) -> torch.device:
    """The device a Graph's kernels run on: the first non-CPU device of its tensors (a GPU
    graph may hold host tensors: index tensors, scalars, `torch.rand([])`), else the CPU."""
    specs = [graph_input.value.spec for graph_input in graph.inputs]
    specs += [value.spec for node in graph.nodes for value in node.output_values()]
    for spec in specs:
        if isinstance(spec, TensorSpec) and spec.device.type != "cpu":
            return spec.device
    return torch.device("cpu")


def broadcast_loader(value: TensorValue, size: Sequence[Expr]) -> body.Loader:
    """Read `value` broadcast (right-aligned, size-1 dims repeated) to `size`."""
    load = value.loader()
    own = value.size
    lead = len(size) - len(own)
    if tuple(own) == tuple(size):
        return load

    def fn(index: body.Index) -> body.BodyValue:
        return load(
            [
                sympy.S.Zero if s == 1 and o != 1 else i
                for i, s, o in zip(index[lead:], own, size[lead:])
            ]
        )

    return fn


def lower_graph(
    graph: Graph,
    dtypes: frozenset[torch.dtype] = SUPPORTED_DTYPES,
    atomic_dtypes: frozenset[torch.dtype] | None = None,
    output_specs: Sequence[TensorSpec | None] | None = None,
    split_reductions: bool = False,
    welford_reductions: bool = False,
    pointwise_convolutions: bool = False,
) -> Program:
    """The Program computing `graph`; lowers again when a viewed lazy value is written.
    Ops reading or producing a dtype outside `dtypes` (what the code generator computes in)
    fall back to their ATen call, as do atomic adds (scatter_add) of a dtype outside
    `atomic_dtypes` (default: `dtypes`). `output_specs` (one per output leaf) are the specs
    the outputs must have: those of the Graph before decomposition, whose prims make
    contiguous tensors where eager kept an input's strides. Later Graphs (a backward reading
    what its forward saved) are compiled against those strides. `split_reductions`: see
    `split_reduction` (for GPUs). `welford_reductions`: variances as one-pass welford_m2
    reductions (`lowering/reductions.py: var`), for code generators that have them.
    `pointwise_convolutions`: see `lowering/pointwise_convolutions.py`."""
    force: set[str] = set()
    while True:
        try:
            return _lower(
                graph,
                force,
                dtypes,
                atomic_dtypes or dtypes,
                output_specs,
                split_reductions,
                welford_reductions,
                pointwise_convolutions,
            )
        except _Restart as restart:
            if restart.name in force:
                raise RuntimeError(f"lowering cannot realize {restart.name}") from None
            force.add(restart.name)


def _lower(
    graph: Graph,
    force: set[str],
    dtypes: frozenset[torch.dtype],
    atomic_dtypes: frozenset[torch.dtype],
    output_specs: Sequence[TensorSpec | None] | None,
    split_reductions: bool,
    welford_reductions: bool,
    pointwise_convolutions: bool,
) -> Program:
    ctx = LoweringContext(
        graph,
        force_realize=set(force),
        dtypes=dtypes,
        atomic_dtypes=atomic_dtypes,
        split_reductions=split_reductions,
        welford_reductions=welford_reductions,
        pointwise_convolutions=pointwise_convolutions,
        compute_device=compute_device(graph),
    )
    program = ctx.program
    for position, graph_input in enumerate(graph.inputs):
        spec = graph_input.value.spec
        if not isinstance(spec, TensorSpec):
            raise Unlowerable(f"input {graph_input.value.name} is not a tensor")
        name = f"in{position}"
        layout = spec_layout(spec, relative=True)
        program.storages[name] = Storage(name, spec.dtype, None, is_input=True, declared=layout)
        program.input_storages.append(name)
        ctx.env[graph_input.value.name] = StorageView(name, layout)
        for dim, size in enumerate(spec.shape):
            if isinstance(size, sympy.Symbol) and str(size) not in program.size_symbols:
                program.size_symbols[str(size)] = (position, dim)
    for node in graph.nodes:
        for ref in _refs([node.args, list(node.kwargs.values())]):
            ctx.uses_left[ref] = ctx.uses_left.get(ref, 0) + 1
            ctx.readers.setdefault(ref, []).append(node)
    for ref in _refs(graph.output_leaves):
        ctx.uses_left[ref] = ctx.uses_left.get(ref, 0) + 1
    for node in graph.nodes:
        _lower_node(ctx, node)
    output_names = {leaf.name for leaf in graph.output_leaves if isinstance(leaf, Ref)}
    for name in output_names:
        value = ctx.env[name]
        root = value.family.root if isinstance(value, Lazy) and value.realized is None else None
        if root is not None and root != name and root in output_names:
            raise _Restart(root)  # an output that views another output must alias it
    ctx.node = None
    lower_outputs(ctx, graph, output_specs)
    return program


def _lower_node(ctx: LoweringContext, node: Node) -> None:
    ctx.node = node
    ctx.reading_now = {}
    for ref in _refs([node.args, list(node.kwargs.values())]):
        ctx.reading_now[ref] = ctx.reading_now.get(ref, 0) + 1
    args = [_bind(ctx, a) for a in node.args]
    kwargs = {k: _bind(ctx, v) for k, v in node.kwargs.items()}
    lowering = LOWERINGS.get(node.target)
    results: Any = None
    if lowering is not None and _supported(node, args, kwargs, ctx.dtypes):
        try:
            results = lowering(ctx, *args, **kwargs)
        except Unlowerable as reason:
            _hint(node, f"no lowering for these arguments ({reason})")
            results = None
    elif lowering is None:
        _hint(node, "no lowering")
    else:
        _hint(node, "dtype not supported by the loop-level IR")
    if results is None:
        results = ctx.extern(node.target, args, kwargs, is_fallback=True)
    if not isinstance(results, list):
        results = [results]
    for output, result in zip(node.outputs, results):
        if isinstance(output, Value):
            ctx.env[output.name] = result
        elif isinstance(output, list):
            for item, value in zip(output, result):
                ctx.env[item.name] = value
    for ref in _refs([node.args, list(node.kwargs.values())]):
        ctx.uses_left[ref] -= 1
    for value in node.output_values():
        lowered = ctx.env.get(value.name)
        if not isinstance(lowered, Lazy) or lowered.realized is not None:
            continue
        if lowered.family.root is None:
            lowered.family.root = value.name
        read = [a for a in args if isinstance(a, Lazy)]
        lowered.sources = _merge(*(a.sources for a in read), lowered.sources, ctx.source())
        store_if_needed(ctx, node, args, value, lowered)


def _bind(ctx: LoweringContext, arg: Any) -> Any:
    if isinstance(arg, Ref):
        value = ctx.env[arg.name]
        if isinstance(value, Lazy) and value.realized is not None:
            return value.realized
        return value
    if isinstance(arg, list):
        return [_bind(ctx, a) for a in arg]
    if isinstance(arg, tuple):
        return tuple(_bind(ctx, a) for a in arg)
    return arg


def _refs(tree: Any) -> list[str]:
    if isinstance(tree, Ref):
        return [tree.name]
    if isinstance(tree, (list, tuple)):
        return [name for item in tree for name in _refs(item)]
    if isinstance(tree, dict):
        return [name for item in tree.values() for name in _refs(item)]
    return []


def _supported(
    node: Node, args: Sequence[Any], kwargs: dict[str, Any], dtypes: frozenset[torch.dtype]
) -> bool:
    for value in node.output_values():
        if isinstance(value.spec, TensorSpec) and value.spec.dtype not in dtypes:
            return False
    return all(tensor.dtype in dtypes for tensor in _tensors([args, list(kwargs.values())]))


def _tensors(tree: Any) -> list[Lazy | StorageView]:
    if isinstance(tree, (Lazy, StorageView)):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    return []


def _hint(node: Node, why: str) -> None:
    where = f"{node.source.short()}: {node.source.code.strip()}" if node.source else "unknown line"
    perf_hints.info("%s falls back to its eager kernel (%s) at %s", node.target, why, where)


def _copy(ctx: LoweringContext, value: StorageView) -> StorageView:
    return ctx.realize(copy_of(value, ctx.origin()))


def _merge(*groups: tuple[str, ...]) -> tuple[str, ...]:
    """User lines in first-seen order, at most a dozen (a kernel comment, not a log)."""
    return tuple(dict.fromkeys(line for group in groups for line in group))[-12:]
