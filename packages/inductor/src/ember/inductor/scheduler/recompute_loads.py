"""Recomputed loads: a loop node that loads a stored pointwise value computes it instead
when everything large the value reads is loaded by the node already.

A training backward stores a batch norm's ReLU output again for the convolution backward
that reads it (an extern call needs memory); the batch-norm backward's reduction and its
input-gradient map then load that output for the ReLU mask beside the convolution output
it was computed from. Computed in place from the convolution output (which both load
anyway) and the per-channel statistics, the mask costs a few operations an element and
each of the two kernels reads one map fewer (ResNet-50 training: two bf16 maps a
batch-norm-ReLU less, see docs/perf/gpu-kernels.md, Session 9).

A load of buffer `B` in node `C` is replaced by the body of `B`'s writer `P` when:
`P` is pointwise (no reduction, no scatter, no random numbers), writes `B` once, densely;
every load of `P`'s body, at `C`'s index, either loads what `C` loads there already or
varies along fewer of `C`'s loops than the load of `B` (a per-channel vector); the storages
`P` reads are written by no extern call in place, no input is written by any node and no
buffer by two; and `B` stays needed (an extern call, the output or a kernel that cannot
compute it reads it): otherwise `P` would store a value no one reads. The value is rounded
to `B`'s dtype as the store did, so results are equal. Runs after fusion, over each kernel's
members (a batch-norm backward's two sums are two nodes, only one of which loads the
convolution output, but they share a kernel); each member's node is rewritten the same way,
so that what a node says it reads stays what its kernel loads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import sympy

from ember.inductor.ir import body
from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.indexing import (
    Expr,
    FloorDiv,
    ModularIndexing,
    index_var,
    simplify_with_ranges,
)
from ember.inductor.ir.program import ExternNode, LoopNode, Program

if TYPE_CHECKING:  # fusion runs this pass: it imports this module
    from ember.inductor.scheduler.fusion import Kernel, Member, ScheduledNode

# a recomputed value costs its operations once per element of every reader: only short
# bodies (a batch-norm-ReLU output is ~12 values) are worth more than the load they save
MOST_OPERATIONS = 32


def recompute_loads(program: Program, scheduled: Sequence[ScheduledNode]) -> None:
    """Rewrites, in place, the members of `scheduled`'s kernels that load a stored pointwise
    value their kernel can compute from what it loads already (see the module docstring)."""
    writers: dict[str, list[LoopNode]] = {}
    extern_writes: set[str] = set()
    extern_reads: set[str] = set()
    for node in program.nodes:
        if isinstance(node, ExternNode):
            extern_writes |= node.writes()
            extern_reads |= node.reads()
        else:
            writers.setdefault(node.storage, []).append(node)
    kept = {arg.storage for arg in program.outputs if hasattr(arg, "storage")}
    recomputable = {
        storage: _writer(nodes[0])
        for storage, nodes in writers.items()
        if len(nodes) == 1
        and storage not in extern_writes
        and _pointwise(nodes[0], program, writers, extern_writes)
    }
    kernels = [item for item in scheduled if not isinstance(item, ExternNode)]
    first = [_rewrites(kernel, recomputable) for kernel in kernels]
    # a value every reader computes itself would be stored for no one: only values that
    # an extern call, the output or some kernel still reads are computed again
    still_read = set(extern_reads | kept)
    for rewrites in first:
        for rewrite in rewrites:
            still_read |= rewrite.loads
    dropped = set(recomputable) - still_read
    recomputable = {s: w for s, w in recomputable.items() if s in still_read}
    for kernel, rewrites in zip(kernels, first):
        if any(dropped & rewrite.loads_before for rewrite in rewrites):
            rewrites = _rewrites(kernel, recomputable)
        for rewrite in rewrites:
            member = rewrite.member
            if rewrite.body is not member.body:
                member.body = rewrite.body
                member.node = dataclasses.replace(member.node, body=rewrite.node_body)


@dataclasses.dataclass(frozen=True)
class _Rewrite:
    """A member's body and its node's body after the rewrite (the same objects when
    unchanged), and the storages the member loads before and after it."""

    member: Member
    body: BodyValue
    node_body: BodyValue
    loads_before: set[str]
    loads: set[str]


def _rewrites(kernel: Kernel, recomputable: dict[str, _Writer]) -> list[_Rewrite]:
    """The rewrite of each member of `kernel`, changed or not."""
    written = {member.node.storage for member in kernel.members}
    member_loads = [member.loads() for member in kernel.members]
    storages = [{str(load.args[0]) for load in loads} for loads in member_loads]
    unchanged = [
        _Rewrite(m, m.body, m.node.body, loaded, loaded)
        for m, loaded in zip(kernel.members, storages)
    ]
    candidates = {
        s: recomputable[s] for loaded in storages for s in loaded - written if s in recomputable
    }
    if not candidates or not all(size.is_Integer for size in (*kernel.outer, *kernel.inner)):
        return unchanged
    ranges: dict[sympy.Symbol, Expr] = {
        **{index_var("x", k): size for k, size in enumerate(kernel.outer)},
        **{index_var("r", k): size for k, size in enumerate(kernel.inner)},
    }
    present = [
        (str(load.args[0]), sympy.expand(load.args[1]))
        for loads in member_loads
        for load in loads
        if isinstance(load.args[1], sympy.Expr)
    ]
    result = []
    for member, before, same in zip(kernel.members, storages, unchanged):
        if member.store_indirect or member.node.store_indirect or not before & set(candidates):
            result.append(same)
            continue
        rewritten = _recomputed(member.body, candidates, ranges, present, written)
        loaded = {str(load.args[0]) for load in body.loads(rewritten)}
        if rewritten is member.body or loaded & set(candidates) & _replaced_somewhere(
            member.body, rewritten, candidates
        ):
            # every load of a storage or none: the node's body must read what the member does
            result.append(same)
            continue
        node = member.node
        node_ranges = {
            **dict(zip(node.variables, node.ranges)),
            **dict(zip(node.reduction_variables, node.reduction_ranges)),
        }
        # the node's own body says what it reads (memory planning, templates): same rewrite
        only = {s: w for s, w in candidates.items() if s in before - loaded}
        node_body = _recomputed(node.body, only, node_ranges, None, written)
        result.append(_Rewrite(member, rewritten, node_body, before, loaded))
    return result


def _pointwise(
    node: LoopNode, program: Program, writers: dict[str, list[LoopNode]], extern_writes: set[str]
) -> bool:
    """Whether `node` computes a short pointwise value from storages that hold the same
    values wherever in the program it is computed again."""
    if node.reduction_type is not None or node.store_indirect or node.store_mode is not None:
        return False
    if body.size(node.body) > MOST_OPERATIONS:
        return False
    for value in body.walk(node.body):
        if value.op in ("random", "masked"):
            return False
        if value.op == "load":
            storage = str(value.args[0])
            written = len(writers.get(storage, []))
            if value.args[2] or storage in extern_writes or written > 1:
                return False
            if written and program.storages[storage].is_input:  # updated in place
                return False
    return _dense_dims(node) is not None


@dataclasses.dataclass(frozen=True)
class _Writer:
    """A recomputable node, with what `_at` needs of it worked out once: its store's dense
    dims, its store index, and the loop variables its other indices use."""

    node: LoopNode
    dims: list[tuple[sympy.Symbol, int, int]]
    stored_at: Expr
    used: frozenset[sympy.Basic]


def _writer(node: LoopNode) -> _Writer:
    dims = _dense_dims(node)
    assert dims is not None  # `_pointwise` checked
    stored_at = sympy.expand(node.store_index)
    used: set[sympy.Basic] = set()
    for value in body.walk(node.body):
        for arg in value.args:
            if isinstance(arg, sympy.Expr) and sympy.expand(arg - stored_at) != 0:
                used |= arg.free_symbols
    return _Writer(node, dims, stored_at, frozenset(used))


def _dense_dims(node: LoopNode) -> list[tuple[sympy.Symbol, int, int]] | None:
    """`(variable, stride, size)` of the node's store index, innermost first, when it
    writes each element of a dense block exactly once (`sum(variable * stride)` with
    strides the running products of the sizes)."""
    expr = sympy.expand(node.store_index)
    dims: list[tuple[sympy.Symbol, int, int]] = []
    for variable, size in zip(node.variables, node.ranges):
        if not size.is_Integer:
            return None
        stride = expr.coeff(variable)
        if int(size) == 1:
            continue
        if not stride.is_Integer or int(stride) <= 0:
            return None
        dims.append((variable, int(stride), int(size)))
    rest = sympy.expand(expr - sum((v * s for v, s, _ in dims), sympy.S.Zero))
    if rest != 0:
        return None
    dims.sort(key=lambda dim: dim[1])
    running = 1
    for _, stride, size in dims:
        if stride != running:
            return None
        running *= size
    return dims


def _recomputed(
    tree: BodyValue,
    recomputable: dict[str, _Writer],
    ranges: dict[sympy.Symbol, Expr],
    present: Sequence[tuple[str, Expr]] | None,
    written: set[str],
) -> BodyValue:
    """`tree` with the loads of recomputable values that `present` (the kernel's loads;
    None: any) covers replaced by their writers' bodies; `tree` itself if none is."""
    replaced: dict[int, BodyValue] = {}
    for value in body.loads(tree):
        writer = recomputable.get(str(value.args[0]))
        if writer is None or value.args[2]:
            continue
        computed = _at(writer, value, ranges, present)
        if computed is not None and not any(
            str(load.args[0]) in written for load in body.loads(computed)
        ):
            replaced[id(value)] = computed
    if not replaced:
        return tree
    memo: dict[int, BodyValue] = {}

    def visit(value: BodyValue) -> BodyValue:
        done = memo.get(id(value))
        if done is not None:
            return done
        if id(value) in replaced:
            result = replaced[id(value)]
        else:
            args = [_visit_arg(value, arg, visit) for arg in value.args]
            result = BodyValue(value.op, tuple(args), value.dtype)
        memo[id(value)] = result
        return result

    return visit(tree)


def _replaced_somewhere(
    before: BodyValue, after: BodyValue, candidates: dict[str, _Writer]
) -> set[str]:
    """Candidate storages loaded fewer times (at fewer indices) after than before."""

    def counts(tree: BodyValue) -> dict[str, int]:
        found: dict[str, int] = {}
        for load in body.loads(tree):
            storage = str(load.args[0])
            if storage in candidates:
                found[storage] = found.get(storage, 0) + 1
        return found

    old, new = counts(before), counts(after)
    return {s for s, n in old.items() if new.get(s, 0) < n}


def _visit_arg(value: BodyValue, arg: object, visit: Callable[[BodyValue], BodyValue]) -> object:
    if isinstance(arg, BodyValue):
        return visit(arg)
    if isinstance(arg, tuple) and value.op == "load":
        return tuple((symbol, visit(item)) for symbol, item in arg)
    return arg


def _at(
    writer: _Writer,
    load: BodyValue,
    ranges: dict[sympy.Symbol, Expr],
    present: Sequence[tuple[str, Expr]] | None,
) -> BodyValue | None:
    """`writer`'s value at `load`'s index in the reader's loops, or None when computing it
    there would load something large that the reader does not load already."""
    index = sympy.expand(load.args[1])
    if not isinstance(index, sympy.Expr):
        return None
    mapping: dict[sympy.Symbol, Expr] = {}
    for position, (variable, stride, size) in enumerate(writer.dims):
        if position == len(writer.dims) - 1:
            mapping[variable] = FloorDiv(index, sympy.Integer(stride))
        else:
            mapping[variable] = ModularIndexing(index, sympy.Integer(stride), sympy.Integer(size))
    for variable in writer.node.variables:
        if variable not in mapping:
            mapping[variable] = sympy.Integer(0)
    renamed = {v: sympy.Dummy(f"w_{v}") for v in mapping}  # the writer's names may be the reader's

    def simplify(expr: Expr) -> Expr:
        return simplify_with_ranges(sympy.expand(expr), ranges)

    # only the variables an index other than the store's uses (simplifying is the cost)
    exact = {renamed[v]: simplify(e) for v, e in mapping.items() if v in writer.used}

    def at_reader(expr: Expr) -> Expr:
        # a load along the writer's own index reads at the reader's index as it is; the rest
        # (a per-channel vector) through the writer's loop variables
        if sympy.expand(expr - writer.stored_at) == 0:
            return index
        return simplify(expr.xreplace(renamed).xreplace(exact))

    computed = body.map_indices(writer.node.body, at_reader)
    spread = index.free_symbols & set(ranges)
    if present is None:
        return body.to_dtype(computed, load.dtype)
    for value in body.loads(computed):
        storage, at = str(value.args[0]), value.args[1]
        if not isinstance(at, sympy.Expr):
            return None
        loaded = any(s == storage and sympy.expand(at - e) == 0 for s, e in present)
        if not loaded and not (at.free_symbols & set(ranges)) < spread:
            return None
    return body.to_dtype(computed, load.dtype)
