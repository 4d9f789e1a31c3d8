"""Which lazy values a lowered node stores (`store_if_needed`, which `graph_lowering` calls for
each lazy result): the rules it applies to
a value read by several nodes (kept lazy when its readers fuse around it, stored when each
reader would reload many whole tensors or when it only upcasts a 16-bit value), each rule a
small function with the measurement that made it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sympy
import torch

from ember.inductor.ir import body
from ember.inductor.ir.indexing import Expr, index_var, product
from ember.inductor.ir.program import LoopNode
from ember.inductor.ir.tensors import Lazy, StorageView, lazy
from ember.prims import Node, Ref, Value, resolve_op

# A reader this many times larger than a value broadcasts it (`broadcast_statistic`).
BROADCAST_RATIO = 8

# A lazy value read by more than one node is computed once into a buffer past this cost.
REALIZE_SHARED_COST = 16
# Any lazy value is computed into a buffer past this cost (bounds inlined body sizes).
REALIZE_ANY_COST = 400
# A shared lazy value whose readers are all elementwise or reduction prims stays lazy up to
# this cost (`row_local_readers`).
REALIZE_ROW_LOCAL_COST = 64
ROW_LOCAL_READS = 4  # ...and reads at most this many storages (each reader reads them again)
# A shared lazy value loading more whole tensors than this is realized, however few its ops
# (`whole_reads`): each reader's kernel would load them all again.
REALIZE_SHARED_READS = 4
# A lazy value of this cost that a reader broadcasts over many more elements is realized
# (`broadcast_statistic`): a batch norm's per-channel scale.
REALIZE_BROADCAST_COST = 5

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import LoweringContext


def trace_body(
    fn: body.Loader, size: Sequence[Expr], prefix: str
) -> tuple[list[sympy.Symbol], body.BodyValue]:
    """`fn` applied to fresh loop variables named `prefix`: the variables and the body."""
    variables = [index_var(prefix, i) for i in range(len(size))]
    return variables, fn(variables)


def narrow_upcast(node: Node, args: Sequence[Any], lowered: Lazy) -> Lazy | None:
    """The 16-bit lazy value a shared float32 value converts exactly (`convert_element_type`
    of a bf16 or fp16 value not stored yet), else None. ResNet-50's backward stored the
    float32 upcast of each stage's input gradient, which both batch norms of the block
    read: 103 MB where the bf16 gradient takes 51 MB (and twice the bytes written and read)."""
    if node.target != "prims::convert_element_type" or not args:
        return None
    source = args[0]
    if not isinstance(source, Lazy) or source.realized is not None or source.size != lowered.size:
        return None
    if source.dtype not in (torch.bfloat16, torch.float16):
        return None
    return source if lowered.dtype in (torch.float32, torch.float64) else None


def upcast_loader(stored: StorageView, dtype: torch.dtype) -> body.Loader:
    load = stored.loader()
    return lambda index: body.to_dtype(load(index), dtype)


def expands(ctx: LoweringContext, value: Lazy) -> bool:
    """Whether `value` has more elements than every storage it reads (overlapping windows:
    max pooling's 3x3 windows of a batch-normalized map, read by its amax and its argmax).
    Realized, it is written and read back at several times the size of its input (ResNet-50's
    stem: 116 MB for a 51 MB map); inlined, each reader loads the input again, from cache."""
    elements = numel(value.size)
    if elements is None:
        return False
    largest = 0
    for name in value.reads:
        storage = ctx.program.storages.get(name)
        layout = None if storage is None else storage.layout or storage.declared
        size = numel(layout.size) if layout is not None else None
        if size is None:
            return False
        largest = max(largest, size)
    return elements > 2 * largest


def numel(size: Sequence[Expr]) -> int | None:
    total = sympy.sympify(product(size)) if size else sympy.S.One
    return int(total) if total.is_Integer else None


def whole_reads(value: Lazy) -> int:
    """How many storages `value` loads at every point (indexed by each of its loop variables
    of size > 1). ResNet-50's backward summed each stage's residual gradient as a chain of
    ReLU masks and branch gradients, a few ops a link: each link, lazy, was loaded again by
    the batch-norm reductions and the gradient kernel of its block (7 maps of 51 MB in one
    kernel of stage 1)."""
    variables, tree = trace_body(value.fn, value.size, "x")
    wanted = {v for v, size in zip(variables, value.size) if size != 1}
    return len(
        {
            str(load.args[0])
            for load in body.loads(tree)
            if isinstance(load.args[1], sympy.Expr) and wanted <= load.args[1].free_symbols
        }
    )


def one_expression(ctx: LoweringContext, value: Value) -> bool:
    """Whether every reader of `value` is an elementwise prim feeding one last reader, which
    reads `value` too: ReLU's `where(x <= 0, 0, x)`. Inlined, `value` is computed once (the
    kernel shares equal subexpressions); realized, it was written and read back in a kernel
    of its own (ResNet-50's residual add before each ReLU: a 51 MB bf16 map)."""
    readers = ctx.readers.get(value.name, [])
    if len(readers) < 2:
        return False
    outputs = {leaf.name for leaf in ctx.graph.output_leaves if isinstance(leaf, Ref)}
    last = readers[-1]
    for reader in readers:
        if getattr(resolve_op(reader.target), "family", None) != "elementwise":
            return False
    for reader in readers[:-1]:  # the last may be an output (a saved activation)
        results = list(reader.output_values())
        if reader is last or len(results) != 1 or results[0].name in outputs:
            return False
        later = ctx.readers.get(results[0].name, [])
        if len(later) != 1 or later[0] is not last:
            return False
    return True


def row_local_readers(ctx: LoweringContext, value: Value) -> bool:
    """Whether every reader of `value` is an elementwise prim or a reduction prim over it,
    none of them an output: what a softmax or a norm reads, all of it computed in one fused
    kernel that keeps the value in registers. BERT's masked attention scores (a product, a
    mask and a scale: 17 ops) were written to memory and read back, 0.135 ms a layer."""
    readers = ctx.readers.get(value.name, [])
    outputs = {leaf.name for leaf in ctx.graph.output_leaves if isinstance(leaf, Ref)}
    for reader in readers:
        family = getattr(resolve_op(reader.target), "family", None)
        if family not in ("elementwise", "reductions"):
            return False
        if any(v.name in outputs for v in reader.output_values()):
            return False
    return bool(readers)


def window_elements(ctx: LoweringContext, value: Value) -> bool:
    """Whether every reader of `value` is a strided view (`as_strided`) that only elementwise
    prims read: max pooling's window elements, each a view of the padded map, searched by a
    chain of selects (ember-prims' decomposition). Inlined, each element loads the map where
    the chain reads it, as a window reduction would; realized, small_cnn's normalized map
    was written and read back in a kernel of its own before every pool."""
    readers = ctx.readers.get(value.name, [])
    for reader in readers:
        if reader.target != "prims::as_strided":
            return False
        for result in reader.output_values():
            for later in ctx.readers.get(result.name, []):
                if getattr(resolve_op(later.target), "family", None) != "elementwise":
                    return False
    return bool(readers)


def window_element(ctx: LoweringContext, node: Node, value: Value) -> bool:
    """Whether `value` is one such window element (an `as_strided` view) that only
    elementwise prims read. Each reader inlines it again and the kernel shares the equal
    expressions; stored, ResNet's stem wrote its padded map once for each of the 9 elements
    of its 3x3 windows (as_strided's realized base) and read them back."""
    if node.target != "prims::as_strided":
        return False
    readers = ctx.readers.get(value.name, [])
    return all(getattr(resolve_op(r.target), "family", None) == "elementwise" for r in readers)


def broadcast_statistic(ctx: LoweringContext, value: Value, lowered: Lazy, cost: int) -> bool:
    """Whether `lowered` is a costly value of few elements, computed from reductions' results
    (and other storages no larger than itself), that a reader broadcasts over at least
    `BROADCAST_RATIO` times more elements: a batch norm's per-channel scale from its sums.
    Inlined, every element of the reader computes it again, and where the reader sits under a
    pooling window's masks once per window element: ResNet's stem computed a double-precision
    variance, a division and a square root 9 times an output in its max pool (0.78 ms of a
    10 ms training step). Stored, it joins the reduction's kernel as its epilogue. Values
    not derived from a reduction (an attention mask from the lengths) stay inlined."""
    if lowered.cost < cost:
        return False
    reduced = {
        node.storage
        for node in ctx.program.nodes
        if isinstance(node, LoopNode) and node.reduction_type is not None
    }
    if not reduced & lowered.reads:
        return False
    elements = numel(lowered.size)
    if elements is None:
        return False
    for name in lowered.reads:
        storage = ctx.program.storages.get(name)
        layout = None if storage is None else storage.layout or storage.declared
        size = numel(layout.size) if layout is not None else None
        if size is None or size > elements:
            return False
    for reader in ctx.readers.get(value.name, []):
        for result in reader.output_values():
            shape = getattr(result.spec, "shape", None)
            total = numel(shape) if shape is not None else None
            if total is not None and total >= BROADCAST_RATIO * elements:
                return True
    return False


def store_if_needed(
    ctx: LoweringContext, node: Node, args: Sequence[Any], value: Value, lowered: Lazy
) -> None:
    """Realize `lowered`, the lazy result `value` of `node`, into a buffer when a rule above
    says so (or store only its 16-bit source when it merely upcasts one); else it stays lazy,
    inlined into its readers."""
    shared = (
        ctx.uses_left.get(value.name, 0) > 1
        and lowered.cost > REALIZE_SHARED_COST
        and not (
            lowered.cost <= REALIZE_ROW_LOCAL_COST
            and len(lowered.reads) <= ROW_LOCAL_READS
            and row_local_readers(ctx, value)
        )
        and not one_expression(ctx, value)
        and not window_elements(ctx, value)
    ) or (
        ctx.uses_left.get(value.name, 0) > 1
        and len(lowered.reads) > REALIZE_SHARED_READS
        and whole_reads(lowered) > REALIZE_SHARED_READS
        and not one_expression(ctx, value)
    )
    shared = shared and not expands(ctx, lowered) and not window_element(ctx, node, value)
    if shared and value.name not in ctx.force_realize:
        narrow = narrow_upcast(node, args, lowered)
        if narrow is not None:
            # store the 16-bit value; the exact float32 upcast stays in its readers
            source = node.args[0]
            layout = ctx.spec_layout(source.name) if isinstance(source, Ref) else None
            stored = ctx.realize(narrow, layout)
            ctx.env[value.name] = lazy(lowered.dtype, lowered.size,
                                       upcast_loader(stored, lowered.dtype), [stored],
                                       ctx.origin())  # fmt: skip
            return
    if (
        value.name in ctx.force_realize
        or shared
        or lowered.cost > REALIZE_ANY_COST
        or broadcast_statistic(ctx, value, lowered, REALIZE_BROADCAST_COST)
    ):
        ctx.realize(lowered, ctx.spec_layout(value.name))
