"""Fusion: group loop nodes into kernels, in program order.

A kernel has outer loops (run in parallel) and, when it reduces, inner loops. A node joins
the kernel being built when its simplified loops match (a reduction over the same loops, a
pointwise node over the outer loops, or one over outer+inner loops: the epilogue) and every
buffer it shares with the kernel's nodes is read and written at the same index (so no
iteration reads what another thread writes). A pointwise node that fits no earlier kernel
where it stands may pull down an earlier pointwise kernel that reads the same buffers, with
the matmuls that read that kernel's results moved after it. A node that accumulates atomically into a storage (scatter_add) shares a kernel
with no node that reads or writes that storage. For a backend that vectorizes a kernel in one
direction (`one_reduction_direction`), a reduction that reads along the outer loop (a column
sum) and one that reads along its own rows never share a kernel.
Buffers written and read only inside one kernel at one loop level stay in registers: they
are never allocated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import sympy

from ember.inductor.ir import body
from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.indexing import Expr, index_var, product, same, simplify_with_ranges
from ember.inductor.ir.program import ExternNode, LoopNode, Program
from ember.inductor.scheduler.loops import body_indices, simplify_loops
from ember.inductor.scheduler.recompute_loads import recompute_loads


@dataclass
class Member:
    """A loop node placed in a kernel: at the outer level, as a reduction, or in an inner
    loop (`group` numbers the inner loop it shares with its neighbours)."""

    node: LoopNode
    level: str  # "outer" | "reduction" | "inner"
    body: BodyValue
    store_index: Expr
    group: int = 0
    store_indirect: tuple[tuple[sympy.Symbol, BodyValue], ...] = ()  # the node's, renamed

    @property
    def store_mode(self) -> str | None:
        return self.node.store_mode

    def loads(self) -> list[BodyValue]:
        """The loads of its body and of the values its store index reads."""
        trees = [self.body, *(value for _, value in self.store_indirect)]
        return [load for tree in trees for load in body.loads(tree)]


@dataclass
class Kernel:
    """Fused loop nodes over one iteration space."""

    name: str
    outer: tuple[Expr, ...]
    inner: tuple[Expr, ...]
    members: list[Member] = field(default_factory=list)
    local_buffers: set[str] = field(default_factory=set)  # never stored to memory

    def origins(self) -> list[str]:
        return list(dict.fromkeys(o for m in self.members for o in m.node.origins))


ScheduledNode = Kernel | ExternNode

# How many scheduled items fusion looks back past to find a kernel to join.
LOOKBACK = 8


def schedule(
    program: Program, prefix: str = "cpp", one_reduction_direction: bool = False
) -> list[ScheduledNode]:
    """The program's nodes grouped into kernels and extern calls, in an order that keeps
    every read after the write it depends on; kernels are named `<prefix>_fused_<ops>_<n>`.
    `one_reduction_direction`: row and column reductions go to separate kernels."""
    scheduled: list[ScheduledNode] = []
    for node in program.nodes:
        if isinstance(node, ExternNode):
            scheduled.append(node)
        elif not _join_earlier(scheduled, node, one_reduction_direction) and not _join_deferred(
            scheduled, node
        ):
            scheduled.append(_new_kernel(node, len(scheduled)))
    recompute_loads(program, scheduled)
    _find_local_buffers(program, scheduled)
    for item in scheduled:
        if isinstance(item, Kernel):
            names = "_".join(item.origins()[:6])
            item.name = f"{prefix}_fused_{names}_{item.name}"
    return scheduled


def _join_earlier(scheduled: list[ScheduledNode], node: LoopNode, one_direction: bool) -> bool:
    """Join the latest kernel `node` fits, looking back past items it does not depend on
    (and that do not touch what it writes), at most `LOOKBACK` items."""
    reads, writes = node.reads(), node.writes()
    for item in reversed(scheduled[-LOOKBACK:]):
        if isinstance(item, Kernel) and _try_join(item, node, one_direction):
            return True
        item_reads, item_writes = _touches(item)
        if item_writes & (reads | writes) or item_reads & writes:
            return False
    return False


# Extern calls that are pure functions of their tensor arguments (no random numbers, no
# writes but their results): they may run later than the program placed them.
DEFERRABLE_EXTERNS = frozenset(
    {
        "aten::mm.default",
        "aten::mm.dtype",
        "aten::addmm.default",
        "aten::bmm.default",
        "aten::baddbmm.default",
    }
)


def _join_deferred(scheduled: list[ScheduledNode], node: LoopNode) -> bool:
    """Join an earlier pointwise kernel that reads some of what pointwise `node` reads (at
    most `LOOKBACK` items back) by moving it down to `node`,
    with the matmuls between that read its results moved after it; every other item between
    stays and must not conflict with what moves past it. A value the backward computes again
    for a weight gradient (Llama's SiLU product, read by the down projection's weight
    gradient before the input gradient that the SiLU backward needs is computed) is then
    computed in the kernel that reads the same inputs for the gradients."""
    if node.reduction_type is not None:
        return False
    start = max(0, len(scheduled) - LOOKBACK)
    for position in range(len(scheduled) - 1, start - 1, -1):
        kernel = scheduled[position]
        # only a pointwise kernel that reads what `node` reads: the move saves those reads
        # (moving reductions, or kernels sharing nothing, only stretched buffers' lifetimes:
        # ViT tiny's backward planned peak 1.20 -> 1.55 MB)
        if (
            not isinstance(kernel, Kernel)
            or any(member.level != "outer" for member in kernel.members)
            or not _touches(kernel)[0] & node.reads()
        ):
            continue
        deferred = _deferred_readers(scheduled, position, node)
        if deferred is None or not _try_join(kernel, node):
            continue
        moved = {id(kernel), *(id(item) for item in deferred)}
        scheduled[:] = [item for item in scheduled if id(item) not in moved]
        scheduled.extend([kernel, *deferred])
        return True
    return False


def _deferred_readers(
    scheduled: list[ScheduledNode], position: int, node: LoopNode
) -> list[ScheduledNode] | None:
    """The items after `position` that must follow the kernel there if it moves down to
    `node` (matmuls reading its results, in order), or None when it cannot move."""
    kernel_reads, kernel_writes = _touches(scheduled[position])
    deferred: list[ScheduledNode] = []
    for item in scheduled[position + 1 :]:
        reads, writes = _touches(item)
        depends = reads & kernel_writes or any(
            writes & _touches(earlier)[0] or reads & _touches(earlier)[1] for earlier in deferred
        )
        if depends:
            if not isinstance(item, ExternNode) or item.target not in DEFERRABLE_EXTERNS:
                return None
            deferred.append(item)
            continue
        # the kernel (and the readers deferred so far) move past this item
        if writes & (kernel_reads | kernel_writes) or reads & kernel_writes:
            return None
        for earlier in deferred:
            earlier_reads, earlier_writes = _touches(earlier)
            if writes & (earlier_reads | earlier_writes) or reads & earlier_writes:
                return None
    for item in deferred:  # `node`, now in the kernel, runs before them
        reads, writes = _touches(item)
        if node.writes() & (reads | writes) or node.reads() & writes:
            return None
    return deferred


def _touches(item: ScheduledNode) -> tuple[set[str], set[str]]:
    if isinstance(item, ExternNode):
        return item.reads(), item.writes()
    reads: set[str] = set()
    writes: set[str] = set()
    for member in item.members:
        reads |= member.node.reads()
        writes |= member.node.writes()
    return reads, writes


def _with_ranges(node: LoopNode) -> LoopNode:
    """The node with index arithmetic its loop ranges make exact removed (cached)."""
    done = _RANGE_SIMPLIFIED.get(id(node))
    if done is not None and done[0] is node:
        return done[1]
    ranges = dict(zip(node.variables, node.ranges))
    ranges.update(zip(node.reduction_variables, node.reduction_ranges))

    def simplify(expr: Expr) -> Expr:
        return simplify_with_ranges(expr, ranges)

    simplified = dataclasses.replace(
        node,
        body=body.map_indices(node.body, simplify),
        store_index=simplify(node.store_index),
        store_indirect=tuple(
            (symbol, body.map_indices(value, simplify)) for symbol, value in node.store_indirect
        ),
    )
    _RANGE_SIMPLIFIED[id(node)] = (node, simplified)
    return simplified


_RANGE_SIMPLIFIED: dict[int, tuple[LoopNode, LoopNode]] = {}


def _indices(node: LoopNode) -> list[Expr]:
    """Every index expression the node uses, its store's included."""
    found = body_indices(node.body, [node.store_index])
    for _, value in node.store_indirect:
        found += body_indices(value)
    return found


def _member(
    node: LoopNode, simplified: LoopNode, level: str, mapping: dict[sympy.Symbol, Expr]
) -> Member:
    """`node` placed at `level`: its range-simplified form's loop variables renamed."""
    return Member(
        node,
        level,
        body.substitute(simplified.body, mapping),
        sympy.expand(simplified.store_index.xreplace(mapping)),
        store_indirect=tuple(
            (symbol, body.substitute(value, mapping)) for symbol, value in simplified.store_indirect
        ),
    )


def _simplified(node: LoopNode) -> tuple[tuple[Expr, ...], tuple[Expr, ...], LoopNode,
                                         dict[sympy.Symbol, Expr]]:  # fmt: skip
    node = _with_ranges(node)
    indices = _indices(node)
    outer = simplify_loops(node.variables, node.ranges, indices, "x", reorder=True)
    inner = simplify_loops(node.reduction_variables, node.reduction_ranges, indices, "r")
    return outer.sizes, inner.sizes, node, {**outer.mapping, **inner.mapping}


def _new_kernel(node: LoopNode, position: int) -> Kernel:
    outer, inner, simplified, mapping = _simplified(node)
    level = "reduction" if node.reduction_type is not None else "outer"
    kernel = Kernel(str(position), outer, inner if node.reduction_type else ())
    kernel.members.append(_member(node, simplified, level, mapping))
    return kernel


def _fit(kernel: Kernel, node: LoopNode) -> Member | None:
    outer, inner, simplified, mapping = _simplified(node)
    if node.reduction_type is not None:
        if _equal(outer, kernel.outer) and _equal(inner, kernel.inner):
            return _member(node, simplified, "reduction", mapping)
        return None
    if _equal(outer, kernel.outer):
        return _member(node, simplified, "outer", mapping)
    if not kernel.inner or not same(product(outer), product(kernel.outer) * product(kernel.inner)):
        return None
    # split the node's own loops into an outer part and an inner part
    indices = _indices(simplified)
    sizes = [s for s in simplified.ranges]
    variables = list(simplified.variables)
    for split in range(len(sizes) + 1):
        if not same(product(sizes[:split]), product(kernel.outer)):
            continue
        head = simplify_loops(variables[:split], sizes[:split], indices, "x")
        tail = simplify_loops(variables[split:], sizes[split:], indices, "r")
        if _equal(head.sizes, kernel.outer) and _equal(tail.sizes, kernel.inner):
            return _member(node, simplified, "inner", {**head.mapping, **tail.mapping})
    return None


def _try_join(kernel: Kernel, node: LoopNode, one_direction: bool = False) -> bool:
    member = _fit(kernel, node)
    if member is None or not _safe(kernel, member):
        return False
    if one_direction and _mixes_directions(kernel, member):
        return False
    if member.level == "inner":
        last = kernel.members[-1]
        member.group = last.group if last.level == "inner" else last.group + 1
    else:
        member.group = kernel.members[-1].group + (1 if kernel.members[-1].level == "inner" else 0)
    kernel.members.append(member)
    return True


def _safe(kernel: Kernel, member: Member) -> bool:
    for other in kernel.members:
        # an atomic accumulation is a read-modify-write at indices known only at run time:
        # nothing else in its kernel may touch its storage
        if other.store_mode is not None and other.node.storage in _storages(member):
            return False
        if member.store_mode is not None and member.node.storage in _storages(other):
            return False
    written = {m.node.storage: m.store_index for m in kernel.members}
    for load in member.loads():
        storage, index = str(load.args[0]), load.args[1]
        if storage in written and (load.args[2] or not _same_index(written[storage], index)):
            return False
    for other in kernel.members:
        for load in other.loads():
            if str(load.args[0]) == member.node.storage and (
                load.args[2] or not _same_index(member.store_index, load.args[1])
            ):
                return False
        if other.node.storage == member.node.storage and not _same_index(
            other.store_index, member.store_index
        ):
            return False
    return True


def _mixes_directions(kernel: Kernel, member: Member) -> bool:
    """Whether `member` would put a column reduction beside a row reduction or an inner
    loop (which runs along the rows) in `kernel`."""
    if not kernel.inner or member.level == "outer":
        return False
    reductions = [m for m in kernel.members if m.level == "reduction"]
    directions = {_reads_along(kernel, m) for m in reductions}
    if member.level == "inner":
        return "column" in directions
    new = _reads_along(kernel, member)
    if new == "column":
        return "row" in directions or any(m.level == "inner" for m in kernel.members)
    return new == "row" and "column" in directions


def _reads_along(kernel: Kernel, member: Member) -> str | None:
    """How a reduction member of `kernel` reads the loads that move along both its last
    outer loop and its innermost reduction loop (a matrix, not a per-row or per-column
    vector): "row" when one is contiguous along the reduction, "column" when one is
    contiguous along the outer loop (`x[r0, x0]`), else None."""
    last_inner = index_var("r", len(kernel.inner) - 1)
    last_outer = index_var("x", len(kernel.outer) - 1)
    strides = [
        (sympy.diff(load.args[1], last_inner), sympy.diff(load.args[1], last_outer))
        for load in member.loads()
        if not load.args[2] and isinstance(load.args[1], sympy.Expr)
    ]
    matrices = [(inner, outer) for inner, outer in strides if inner != 0 and outer != 0]
    if any(inner == 1 for inner, _ in matrices):
        return "row"
    if any(outer == 1 for _, outer in matrices):
        return "column"
    return None


def _storages(member: Member) -> set[str]:
    return {member.node.storage, *(str(load.args[0]) for load in member.loads())}


def _same_index(a: object, b: object) -> bool:
    return isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr) and sympy.expand(a - b) == 0


def _equal(a: Sequence[Expr], b: Sequence[Expr]) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def _find_local_buffers(program: Program, scheduled: Sequence[ScheduledNode]) -> None:
    """Buffers a kernel writes once and reads only itself, at the writer's loop level."""
    readers: dict[str, list[tuple[int, Member | None]]] = {}
    writers: dict[str, int] = {}
    for position, item in enumerate(scheduled):
        if isinstance(item, ExternNode):
            for storage in item.reads():
                readers.setdefault(storage, []).append((position, None))
            continue
        for member in item.members:
            for load in member.loads():
                readers.setdefault(str(load.args[0]), []).append((position, member))
            writers[member.node.storage] = writers.get(member.node.storage, 0) + 1
    kept = {arg.storage for arg in program.outputs if hasattr(arg, "storage")}
    for position, item in enumerate(scheduled):
        if not isinstance(item, Kernel):
            continue
        for member in item.members:
            storage = member.node.storage
            info = program.storages[storage]
            if info.is_input or info.layout is None or storage in kept or writers[storage] != 1:
                continue
            if member.store_mode is not None:  # accumulates into memory, never a register
                continue
            uses = readers.get(storage, [])
            if all(
                where == position
                and reader is not None
                and (
                    member.level != "inner"
                    or (reader.level == "inner" and reader.group == member.group)
                )
                for where, reader in uses
            ):
                item.local_buffers.add(storage)


__all__ = ["Kernel", "Member", "ScheduledNode", "index_var", "schedule"]
