"""Mixed-order reductions: a split column sum computed inside the row reduction that reads
the same maps.

A norm's backward reduces its maps two ways: along each row (the input gradient's row sums)
and down each column (the weight gradient, split into chunks of rows by
`lowering/split_reduction.py`: a first kernel writes `[chunks, features]` partial sums, a
second sums them). Both first kernels read the same maps. Here the chunk kernel joins the
row kernel as a `MixedOrderKernel`: each program loops over a block of whole rows (persistent
tiles: a row fits one tile), does the row kernel's work for them and accumulates the column
sums of its rows in registers, then writes one row of partial sums. The maps are read once.
Programs cover fewer rows than the lowering's chunks when the partials' only reader (the
second kernel, a plain sum over them) can take more of them: Llama's 64 chunks of 128 rows
would leave half of an H100's multiprocessors idle. Anything that does not match exactly
keeps the two kernels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import sympy

from ember.inductor.ir import body
from ember.inductor.ir.indexing import Expr, FloorDiv, index_var
from ember.inductor.ir.program import LoopNode, Program
from ember.inductor.ir.tensors import Layout
from ember.inductor.scheduler.fusion import Kernel, Member, ScheduledNode

# longest row a program holds in one tile (codegen/triton/heuristics.py's PERSISTENT_LIMIT):
# a longer row would loop, and the column sums of its r-blocks would not stay in registers
ROW_LIMIT = 1024
# programs to aim for when the partials' reader can take more of them than the lowering's
# chunks (about 4 a multiprocessor on an H100; not tuned on the GPU yet)
TARGET_PROGRAMS = 512
MIN_PROGRAMS = 128  # fewer programs than this leave the GPU idle: keep the two kernels
MIN_ROWS = 8  # rows a program covers at least (its partial row costs a write and a read)
LOOKAHEAD = 8  # scheduled items between the chunk kernel and the row kernel, at most


@dataclass
class MixedOrderKernel(Kernel):
    """A row reduction kernel (`outer` = (rows,), `inner` = (features,)) whose members
    include column sums (level "column"): program p covers rows [p * rows_per_program,
    (p + 1) * rows_per_program) and stores its column sums at row p of their partials
    (`[programs, features]`, contiguous)."""

    rows_per_program: int = 1
    programs: int = 1


def combine_mixed_order_reductions(
    program: Program, scheduled: list[ScheduledNode]
) -> list[ScheduledNode]:
    """`scheduled` with each chunked column sum kernel joined to the row kernel after it
    that reads the same maps (see the module docstring)."""
    position = 0
    while position < len(scheduled):
        item = scheduled[position]
        if isinstance(item, Kernel) and not isinstance(item, MixedOrderKernel):
            combined = _combine_at(program, scheduled, position)
            if combined is not None:
                scheduled = combined
        position += 1
    return scheduled


def _column_chunks(kernel: Kernel) -> tuple[int, int, int] | None:
    """(chunks, features, rows a chunk) of a chunk kernel of split column sums, else None."""
    if len(kernel.outer) != 2 or len(kernel.inner) != 1:
        return None
    sizes = [*kernel.outer, *kernel.inner]
    if not all(isinstance(s, sympy.Integer) for s in sizes):
        return None
    for member in kernel.members:
        node = member.node
        if member.level != "reduction" or node.reduction_type != "sum":
            return None
        if node.store_mode is not None or member.store_indirect:
            return None
        chunk, feature = index_var("x", 0), index_var("x", 1)
        if sympy.expand(member.store_index - (kernel.outer[1] * chunk + feature)) != 0:
            return None  # partials laid out [chunks, features], contiguous
    chunks, features, rows = (int(s) for s in sizes)
    return chunks, features, rows


def _row_kernel(kernel: ScheduledNode, rows: int, features: int) -> bool:
    """Whether `kernel` reduces each of `rows` rows of `features` that fit one tile."""
    if not isinstance(kernel, Kernel) or isinstance(kernel, MixedOrderKernel):
        return False
    if len(kernel.outer) != 1 or len(kernel.inner) != 1 or features > ROW_LIMIT:
        return False
    if kernel.outer[0] != rows or kernel.inner[0] != features:
        return False
    # (an atomic accumulation among its members, Llama's first norm's input gradient added
    # into the embedding gradient, runs as it did: the column sums touch no storage of it)
    return any(m.level == "reduction" for m in kernel.members)


def _combine_at(
    program: Program, scheduled: list[ScheduledNode], position: int
) -> list[ScheduledNode] | None:
    chunk_kernel = scheduled[position]
    assert isinstance(chunk_kernel, Kernel)
    found = _column_chunks(chunk_kernel)
    if found is None:
        return None
    chunks, features, rows = found
    between: list[ScheduledNode] = []
    for item in scheduled[position + 1 : position + 1 + LOOKAHEAD]:
        if _row_kernel(item, chunks * rows, features):
            assert isinstance(item, Kernel)
            combined = _combine(program, scheduled, chunk_kernel, item, between)
            if combined is not None:
                return combined
        between.append(item)
    return None


def _combine(
    program: Program,
    scheduled: list[ScheduledNode],
    chunk_kernel: Kernel,
    row_kernel: Kernel,
    between: Sequence[ScheduledNode],
) -> list[ScheduledNode] | None:
    """The schedule with `row_kernel` moved up to `chunk_kernel` and the two combined, or
    None when that would break a dependency or read more than the two did."""
    row_reads, row_writes = _touches(row_kernel)
    chunk_reads, chunk_writes = _touches(chunk_kernel)
    if row_reads & chunk_writes or chunk_reads & row_writes or row_writes & chunk_writes:
        return None
    for item in between:  # the row kernel moves up past these
        reads, writes = _touches(item)
        if writes & (row_reads | row_writes) or reads & row_writes:
            return None
    chunks, features, rows = (int(s) for s in (*chunk_kernel.outer, *chunk_kernel.inner))
    # the chunk kernel's loads, in the row kernel's loops: row x0 is chunk x0 // rows,
    # row-in-chunk x0 % rows; feature r0
    row, feature = index_var("x", 0), index_var("r", 0)
    chunk_of_row = sympy.floor(row / rows)
    mapping = {
        index_var("x", 0): chunk_of_row,
        index_var("x", 1): feature,
        index_var("r", 0): row - rows * chunk_of_row,
    }
    row_loads: dict[str, list[body.BodyValue]] = {}
    for row_member in row_kernel.members:
        for load in row_member.loads():
            row_loads.setdefault(str(load.args[0]), []).append(load)
    split = _resplit(program, scheduled, chunk_kernel, chunks, rows)
    if split * chunks < MIN_PROGRAMS:
        return None
    per_program = rows // split
    program_of_row = FloorDiv(row, sympy.Integer(per_program))
    columns: list[Member] = []
    for member in chunk_kernel.members:
        mapped = body.substitute(member.body, mapping)
        shared = _share_loads(mapped, row_loads)
        if shared is None:
            return None  # it reads something the row kernel does not: no bytes saved
        columns.append(
            Member(member.node, "column", shared, features * program_of_row + feature, group=0)
        )
    if split > 1:
        _apply_resplit(program, scheduled, chunk_kernel, chunks * split, features)
    mixed = MixedOrderKernel(
        row_kernel.name,
        row_kernel.outer,
        row_kernel.inner,
        [*row_kernel.members, *columns],
        set(row_kernel.local_buffers),
        rows_per_program=per_program,
        programs=chunks * split,
    )
    mixed.name = row_kernel.name.replace("_fused_", "_fused_mixed_", 1)
    result: list[ScheduledNode] = []
    for item in scheduled:
        if item is chunk_kernel:
            result.append(mixed)
        elif item is not row_kernel:
            result.append(item)
    return result


def _share_loads(
    tree: body.BodyValue, row_loads: dict[str, list[body.BodyValue]]
) -> body.BodyValue | None:
    """`tree` with each load's index (and an indirect load's index values) replaced by the
    row kernel's equal load's (so that codegen shares the load, or for an indirect one the
    values its index reads), or None when a load has no equal in the row kernel."""
    missing: list[object] = []

    def finish(value: body.BodyValue, args: list[object]) -> None:
        if value.op != "load":
            return
        storage, index, indirect = str(args[0]), args[1], args[2]
        assert isinstance(index, sympy.Expr) and isinstance(indirect, tuple)
        for candidate in row_loads.get(storage, []):
            if _same_load(index, indirect, candidate):
                args[1], args[2] = candidate.args[1], candidate.args[2]
                return
        missing.append(value)

    rebuilt = body.rebuild_tree(tree, finish=finish)
    # an index the row kernel does not have (an index_expr of the row in its chunk) keeps
    # sympy's floor, which codegen does not print: keep the two kernels
    floors: list[Expr] = []

    def note_floor(index: Expr) -> Expr:
        if index.has(sympy.floor):
            floors.append(index)
        return index

    body.map_indices(rebuilt, note_floor)
    return None if missing or floors else rebuilt


def _same_load(index: Expr, indirect: tuple[object, ...], candidate: body.BodyValue) -> bool:
    """Whether a load at `index` (its symbols bound by `indirect`) reads what `candidate`
    (a load of the same storage) reads: equal index values bound in the same order, and
    equal indices once the symbols are renamed."""
    theirs = candidate.args[2]
    assert isinstance(theirs, tuple)
    if len(theirs) != len(indirect):
        return False
    renames: dict[sympy.Basic, sympy.Basic] = {}
    for ours, their in zip(indirect, theirs):
        assert isinstance(ours, tuple) and isinstance(their, tuple)
        if not _same_tree(ours[1], their[1]):
            return False
        renames[ours[0]] = their[0]
    other = candidate.args[1]
    assert isinstance(other, sympy.Expr)
    return sympy.expand(index.xreplace(renames) - other) == 0


def _same_tree(a: object, b: object) -> bool:
    """Structural equality of two body values (loads compared by `_same_load`)."""
    if isinstance(a, body.BodyValue) and isinstance(b, body.BodyValue):
        if a is b:
            return True
        if a.op != b.op or a.dtype != b.dtype or len(a.args) != len(b.args):
            return False
        if a.op == "load":
            index, indirect = a.args[1], a.args[2]
            assert isinstance(index, sympy.Expr) and isinstance(indirect, tuple)
            return a.args[0] == b.args[0] and _same_load(index, indirect, b)
        return all(_same_tree(x, y) for x, y in zip(a.args, b.args))
    if isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr):
        return sympy.expand(a - b) == 0
    if isinstance(a, body.BodyValue) or isinstance(b, body.BodyValue):
        return False
    return type(a) is type(b) and a == b


def _partial_reader(
    program: Program, scheduled: Sequence[ScheduledNode], chunk_kernel: Kernel
) -> Kernel | None:
    """The one kernel that reads the chunk kernel's partials, when each is a plain sum over
    them (`[features]` outputs over `chunks` partials at `features * r0 + x0`), else None."""
    partials = {m.node.storage for m in chunk_kernel.members}
    kept = {arg.storage for arg in program.outputs if hasattr(arg, "storage")}
    if partials & kept:
        return None
    readers = [
        item for item in scheduled if item is not chunk_kernel and _touches(item)[0] & partials
    ]
    if len(readers) != 1 or not isinstance(readers[0], Kernel):
        return None
    reader = readers[0]
    if isinstance(reader, MixedOrderKernel) or len(reader.members) != len(partials):
        return None
    for name in partials:  # contiguous [chunks, features] (or [*chunk dims, features])
        layout = program.storages[name].layout
        if layout is None or not layout.is_contiguous() or layout.offset != 0:
            return None
    chunks, features = chunk_kernel.outer
    if tuple(reader.outer) != (features,) or tuple(reader.inner) != (chunks,):
        return None
    for member in reader.members:
        node = member.node
        if member.level != "reduction" or node.reduction_type != "sum":
            return None
        if node.store_mode is not None or member.store_indirect:
            return None
        expected = features * index_var("r", 0) + index_var("x", 0)
        for load in member.loads():
            if str(load.args[0]) not in partials:
                return None
            if load.args[2] or sympy.expand(load.args[1] - expected) != 0:
                return None
    return reader


def _resplit(
    program: Program, scheduled: Sequence[ScheduledNode], chunk_kernel: Kernel, chunks: int,
    rows: int,
) -> int:  # fmt: skip
    """Programs a chunk is split into (1: the lowering's chunks stay)."""
    if _partial_reader(program, scheduled, chunk_kernel) is None:
        return 1
    best = 1
    for split in range(1, rows + 1):
        if rows % split or rows // split < MIN_ROWS or chunks * split > TARGET_PROGRAMS:
            continue
        best = split
    return best


def _apply_resplit(
    program: Program,
    scheduled: Sequence[ScheduledNode],
    chunk_kernel: Kernel,
    partial_rows: int,
    features: int,
) -> None:
    """The partials become `[partial_rows, features]` and their reader sums that many (its
    loop node keeps the lowering's ranges: after scheduling, codegen reads the kernel's)."""
    reader = _partial_reader(program, scheduled, chunk_kernel)
    assert reader is not None
    size = sympy.Integer(partial_rows)
    reader.inner = (size,)
    for member in chunk_kernel.members:
        storage = program.storages[member.node.storage]
        assert storage.layout is not None
        program.storages[storage.name] = dataclasses.replace(
            storage,
            layout=Layout.contiguous(storage.dtype, (size, sympy.Integer(features))),
        )


def _touches(item: ScheduledNode) -> tuple[set[str], set[str]]:
    if not isinstance(item, Kernel):
        return item.reads(), item.writes()
    reads: set[str] = set()
    writes: set[str] = set()
    for member in item.members:
        node: LoopNode = member.node
        reads |= node.reads()
        writes |= node.writes()
    return reads, writes


__all__ = ["MixedOrderKernel", "combine_mixed_order_reductions"]
