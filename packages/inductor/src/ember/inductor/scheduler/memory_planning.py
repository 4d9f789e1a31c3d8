"""Memory planning: when each buffer of the wrapper is allocated, whose memory it takes, and
when it is released.

The scheduled program is walked in order with each storage's last use:

- **Aliasing.** An extern op's outputs share memory with its tensor arguments unless the op is
  an ATen operator whose schema returns fresh tensors (`mm`, `convolution`, attention, ...;
  ember's prims, which return views without saying so, and fallbacks count as aliasing). The
  outputs of one extern call share memory with each other (one op may return views of one
  allocation). Storages that share memory form a group; a group's memory is dead after the
  last use of any member, never if a member is a graph input or a graph output.
- **Reuse.** A buffer the wrapper allocates (`empty_strided`) takes the memory of a dead group
  of one storage (a buffer or a fresh extern result) with the same dtype and device and exactly
  the same span in elements, so the block is neither larger than needed nor split; graph
  outputs never take reused memory (the caller owns them).
- **In place.** A pure pointwise kernel (no reduction, no inner loop, plain stores) writes a
  new buffer into the memory of a buffer it reads for the last time when every load of that
  buffer in the kernel is in the member that stores the new one and reads exactly the element
  being stored (same flat index, no indirect index): each element is loaded for the value
  that overwrites it, by the same thread, so no compiler can order the store first. Graph
  inputs are never written (the caller still holds them).
- **Donated inputs** (inductor's `wider_in_place`, on by default). A graph input in `donated` (a training backward's saved values and
  tangents, whose caller hands the wrapper its only references) may be such a buffer too, but
  only if the call holds its only reference: the allocation is `checked`, and the wrapper
  tests at run time that no one else holds the tensor or its storage (a caller that kept it,
  a view of it, autograd keeping the graph), else it allocates. The buffer is a view of the
  input tensor at its own offset, over the same span (the kernels index both flat). A
  Llama-style backward writes the logits' gradient over the saved logits (500 MB on the
  suite's GPU size) instead of beside them.
- **Release.** Every storage's Python reference is dropped after its last use (`del`), so the
  caching allocator gets blocks back as soon as they are dead. Graph inputs too (not those that
  are graph outputs): a caller that hands the wrapper its only references (a training
  backward's saved values, `CompiledGraph.call_boxed`) gets each freed after its last read,
  as torch.compile's boxed backward does; `unread_inputs` are dropped right after the sizes
  are bound.

`planned_peak_bytes` is the largest sum of bytes of the memory the wrapper owns (its buffers
and extern results, inputs excluded) live at one point, for graphs of static sizes: the figure
the planner minimizes, and what the tests check. `planned_block_bytes` is the same over the
buffers below `BLOCK_BUFFER_LIMIT` alone: the one block a CUDA graph's recording may reserve
first, so that those buffers share one segment of the caching allocator and merge when they
are freed (ember-runtime's `cudagraph_reserve_block`), where a segment of its own for each
(the allocator's way above 10 MB) leaves freed memory in pieces no later request fits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy
import torch

from ember.inductor.codegen.backend import KernelSource
from ember.inductor.ir.program import ExternNode, Program, TensorArg
from ember.inductor.ir.tensors import Layout
from ember.inductor.scheduler.fusion import Kernel, ScheduledNode

# Buffers from this size on stay out of `planned_block_bytes`: a segment of their own wastes
# little, and one freed is as large as a request for it (a Llama-style model's 500 MB logits).
BLOCK_BUFFER_LIMIT = 128 * 2**20

# ATen results that never alias an argument even where a schema cannot say so.
_FRESH_PREFIXES = ("aten::",)


@dataclass(frozen=True)
class Allocation:
    """A buffer the wrapper creates before a kernel: fresh (`reuses` None) or as a view of the
    dead storage `reuses` (`in_place`: a storage the same kernel reads for the last time and
    releases after it; otherwise the donor's name is released right after this line)."""

    name: str
    layout: Layout
    reuses: str | None = None
    in_place: bool = False
    checked: bool = False  # `reuses` is a donated input: taken only if the call holds it alone


@dataclass
class MemoryPlan:
    """What the wrapper does about memory around each scheduled item (by position)."""

    allocations: dict[int, list[Allocation]] = field(default_factory=dict)
    releases: dict[int, list[str]] = field(default_factory=dict)
    fresh_allocations: int = 0  # empty_strided calls
    reused: int = 0  # buffers placed in dead memory (in place included)
    in_place: int = 0
    donated: int = 0  # buffers that take a donated input's memory when the call holds it alone
    planned_peak_bytes: int | None = None  # None when a size is symbolic
    planned_block_bytes: int | None = None  # the same over buffers below BLOCK_BUFFER_LIMIT
    unread_inputs: list[str] = field(default_factory=list)  # inputs no scheduled item touches


def plan_memory(
    program: Program,
    scheduled: Sequence[ScheduledNode],
    sources: Mapping[str, KernelSource],
    reuse: bool = True,
    donated: frozenset[str] = frozenset(),
    mixed_kernels: bool = False,
) -> MemoryPlan:
    """The allocation, reuse and release plan of `scheduled` (see the module docstring);
    `reuse=False` allocates every buffer fresh (releases are the same). `donated`: input
    storages whose memory a buffer may take when the call holds their only reference;
    `mixed_kernels`: kernels with reductions may write in place too (both are inductor's
    `wider_in_place`, on by default)."""
    plan = MemoryPlan()
    inputs = set(program.input_storages)
    local: set[str] = set()
    for item in scheduled:
        if isinstance(item, Kernel):
            local |= item.local_buffers
    last_use = _last_uses(program, scheduled)
    input_last_use = _input_last_uses(program, scheduled, sources)
    groups = _alias_groups(program, scheduled)
    members: dict[str, list[str]] = {}
    for name, root in groups.items():
        members.setdefault(root, []).append(name)
    kept = {arg.storage for arg in program.outputs if isinstance(arg, TensorArg)}
    pinned = {groups[name] for name in kept | inputs if name in groups}
    group_end = {
        root: max((last_use.get(n, -1) for n in names), default=-1)
        for root, names in members.items()
    }

    input_roots = {groups[name] for name in inputs if name in groups}
    dying: dict[int, list[str]] = {}
    for name, last in last_use.items():
        dying.setdefault(last, []).append(name)
    input_dying: dict[int, list[str]] = {}
    for name, last in input_last_use.items():
        input_dying.setdefault(last, []).append(name)
    plan.unread_inputs = [
        name for name in program.input_storages if name not in input_last_use and name not in kept
    ]
    ending: dict[int, list[str]] = {}
    for root, end in group_end.items():
        ending.setdefault(end, []).append(root)
    allocated: set[str] = set()
    allocated_roots: set[str] = set()
    consumed: set[str] = set()  # storages whose memory another buffer took
    free: list[str] = []  # dead single-storage groups whose memory can be taken
    released_at: dict[str, int] = {}
    live_bytes = 0
    peak: int | None = 0
    block = _BlockCount()
    owned: dict[str, int | None] = {}  # group root -> bytes counted while live
    for position, item in enumerate(scheduled):
        if isinstance(item, Kernel):
            in_place = (
                _in_place_candidates(
                    item,
                    program,
                    last_use,
                    position,
                    input_last_use,
                    donated - kept,
                    mixed_kernels,
                )
                if reuse
                else {}
            )
            new: list[Allocation] = []
            for argument in sources[item.name].arguments:
                name = argument.name
                if argument.kind != "pointer" or name in allocated or name in inputs:
                    continue
                layout = program.storages[name].layout
                if layout is None or name in local:
                    continue
                allocated.add(name)
                allocated_roots.add(groups[name])
                donor = None
                if reuse and name not in kept and groups[name] not in pinned:
                    donor = _take_in_place(name, layout, in_place, groups, members, program)
                    if donor is not None and program.storages[donor].is_input:
                        # taken only when the call holds it alone: counted as fresh memory
                        new.append(Allocation(name, layout, donor, in_place=True, checked=True))
                        plan.donated += 1
                        owned[groups[name]] = size = _nbytes(layout)
                        live_bytes, peak = _grow(live_bytes, peak, size)
                        block.grow(size)
                        continue
                    if donor is not None:
                        new.append(Allocation(name, layout, donor, in_place=True))
                        plan.in_place += 1
                    else:
                        donor = _take_free(layout, free, program)
                        if donor is not None:  # its `del` moves after this allocation
                            new.append(Allocation(name, layout, donor))
                            plan.releases[released_at.pop(donor)].remove(donor)
                if donor is None:
                    new.append(Allocation(name, layout))
                    plan.fresh_allocations += 1
                    size = _nbytes(layout)
                    owned[groups[name]] = size
                    live_bytes, peak = _grow(live_bytes, peak, size)
                    block.grow(size)
                else:
                    plan.reused += 1
                    consumed.add(donor)
                    # the donor's bytes pass to the new buffer's group
                    owned[groups[name]] = owned.pop(groups[donor], 0)
                    if donor in free:
                        free.remove(donor)
            if new:
                plan.allocations[position] = new
        else:
            for output in item.outputs:
                if output is None or output in inputs:
                    continue
                root = groups[output]
                if root in owned or root in allocated_roots or root in input_roots:
                    continue  # a view of memory already counted, or of the caller's
                declared = program.storages[output].declared
                size = _nbytes(declared) if declared is not None else None
                owned[root] = size
                live_bytes, peak = _grow(live_bytes, peak, size)
                block.grow(size)
            for output in item.outputs:
                if output is not None:
                    allocated.add(output)
                    allocated_roots.add(groups[output])
        dead = sorted(n for n in dying.get(position, ()) if n in allocated)
        dead += sorted(input_dying.get(position, ()))
        if dead:
            plan.releases[position] = dead
            released_at.update((n, position) for n in dead)
        for root in ending.get(position, ()):
            if root in pinned:
                continue
            size = owned.pop(root, 0)
            live_bytes = live_bytes - size if size is not None else live_bytes
            block.shrink(size)
            if len(members[root]) == 1 and root in allocated and reuse and root not in consumed:
                free.append(root)
    plan.planned_peak_bytes = peak
    plan.planned_block_bytes = block.peak
    return plan


class _BlockCount:
    """Live and peak bytes of the buffers below `BLOCK_BUFFER_LIMIT` (peak None once a size
    is symbolic)."""

    def __init__(self) -> None:
        self.live = 0
        self.peak: int | None = 0

    def grow(self, size: int | None) -> None:
        if size is None:
            self.peak = None
        elif size < BLOCK_BUFFER_LIMIT:
            self.live += size
            if self.peak is not None:
                self.peak = max(self.peak, self.live)

    def shrink(self, size: int | None) -> None:
        if size is not None and size < BLOCK_BUFFER_LIMIT:
            self.live -= size


def _grow(live: int, peak: int | None, size: int | None) -> tuple[int, int | None]:
    if size is None or peak is None:
        return live, None
    live += size
    return live, max(peak, live)


def _last_uses(program: Program, scheduled: Sequence[ScheduledNode]) -> dict[str, int]:
    """Position of the last scheduled item touching each storage the wrapper owns."""
    kept = {arg.storage for arg in program.outputs if isinstance(arg, TensorArg)}
    last: dict[str, int] = {}
    for position, item in enumerate(scheduled):
        for name in _touched(item):
            if name not in kept and not program.storages[name].is_input:
                last[name] = position
    return last


def _touched(item: ScheduledNode) -> set[str]:
    """The storages a scheduled item reads or writes: a kernel's members and loads, an
    extern's reads and writes."""
    if not isinstance(item, Kernel):
        return item.reads() | item.writes()
    used = {m.node.storage for m in item.members}
    for member in item.members:
        used |= {str(load.args[0]) for load in member.loads()}
    return used


def _input_last_uses(
    program: Program, scheduled: Sequence[ScheduledNode], sources: Mapping[str, KernelSource]
) -> dict[str, int]:
    """Position of the last scheduled item touching each graph input that is no graph output
    (its name is dropped there; a view or alias made of it holds the memory on its own): a
    kernel's loads and stores and the arguments its source takes, an extern's reads and
    writes."""
    kept = {arg.storage for arg in program.outputs if isinstance(arg, TensorArg)}
    inputs = set(program.input_storages) - kept
    last: dict[str, int] = {}
    for position, item in enumerate(scheduled):
        used = _touched(item)
        if isinstance(item, Kernel):
            used |= {argument.name for argument in sources[item.name].arguments}
        for name in used & inputs:
            last[name] = position
    return last


def _alias_groups(program: Program, scheduled: Sequence[ScheduledNode]) -> dict[str, str]:
    """Each storage's group root (union-find over storages that may share memory)."""
    parent = {name: name for name in program.storages}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    def union(a: str, b: str) -> None:
        parent[root(a)] = root(b)

    for item in scheduled:
        if not isinstance(item, ExternNode):
            continue
        outputs = [o for o in item.outputs if o is not None]
        for other in outputs[1:]:
            union(other, outputs[0])
        if outputs and not returns_fresh(item.target):
            for name in item.reads() | item.writes_to:
                union(name, outputs[0])
    return {name: root(name) for name in program.storages}


def returns_fresh(target: str) -> bool:
    """Whether the op's results are new memory (an ATen schema without aliasing returns)."""
    if not target.startswith(_FRESH_PREFIXES):
        return False
    from ember.prims import resolve_op

    try:
        op = resolve_op(target)
    except Exception:
        return False
    schema = getattr(op, "_schema", None)
    if schema is None or schema.is_mutable:
        return False
    if any(r.alias_info is not None for r in schema.returns):
        return False
    tags = getattr(op, "tags", ())
    return torch.Tag.view_copy not in tags if hasattr(torch.Tag, "view_copy") else True


def _span(layout: Layout) -> sympy.Expr:
    """Elements from the allocation's start to one past the last element."""
    extent = sympy.Integer(1)
    for size, stride in zip(layout.size, layout.stride):
        extent += (sympy.sympify(size) - 1) * sympy.sympify(stride)
    return sympy.expand(extent + sympy.sympify(layout.offset))


def _nbytes(layout: Layout) -> int | None:
    span = _span(layout)
    if not span.is_Integer:
        return None
    if any(s == 0 for s in layout.size):
        return 0
    return int(span) * torch.empty((), dtype=layout.dtype).element_size()


def _layout_of(name: str, program: Program) -> Layout | None:
    storage = program.storages[name]
    return storage.layout if storage.layout is not None else storage.declared


def _compatible(layout: Layout, name: str, program: Program) -> bool:
    other = _layout_of(name, program)
    return (
        other is not None
        and other.dtype == layout.dtype
        and sympy.expand(_span(other) - _span(layout)) == 0
    )


def _take_free(layout: Layout, free: list[str], program: Program) -> str | None:
    """A dead buffer for `layout`: one in the same layout if any (the wrapper then binds the
    donor's tensor itself instead of an `as_strided` view of it, ~2-3.5 us a call on the
    H100's host: GPT-2's cast weights alternate between [768, 3072] and [3072, 768] buffers,
    24 views a forward), else the most recently freed (the warmest)."""
    warmest = None
    for name in reversed(free):
        if _compatible(layout, name, program):
            other = _layout_of(name, program)
            if other is not None and _same_layout(other, layout):
                return name
            if warmest is None:
                warmest = name
    return warmest


def _same_layout(a: Layout, b: Layout) -> bool:
    return (a.dtype, tuple(a.size), tuple(a.stride), a.offset) == (
        b.dtype,
        tuple(b.size),
        tuple(b.stride),
        b.offset,
    )


def _in_place_candidates(
    kernel: Kernel,
    program: Program,
    last_use: Mapping[str, int],
    position: int,
    input_last_use: Mapping[str, int],
    donated: frozenset[str],
    mixed_kernels: bool = False,
) -> dict[str, list[str]]:
    """For a pure pointwise kernel: stored storage -> the storages it may overwrite (each read
    for the last time here, only at the stored element and only by the storing member, so
    every overwritten element is loaded for the value that overwrites it). Inputs only if
    `donated`.

    With `mixed_kernels`, a kernel with reductions qualifies too (a plain kernel, not a
    template's): a storing
    member that is a plain store (no reduction, no store mode, no indirect index) may take
    the memory of a storage only it reads, only at the element it stores; other members (a
    row's reduction, say) never read that storage, so no read can come after the overwrite.
    The softmax cross-entropy's backward is such a kernel: a row sum, then the logits'
    gradient over the saved logits."""
    pure = not kernel.inner and all(
        m.level == "outer" and m.node.reduction_type is None and m.store_mode is None
        for m in kernel.members
    )
    if not pure and (not mixed_kernels or type(kernel) is not Kernel):
        return {}
    loads: dict[str, list[tuple[int, object, bool]]] = {}
    for index, member in enumerate(kernel.members):
        for load in member.loads():
            storage, load_index, indirect = load.args
            loads.setdefault(str(storage), []).append((index, load_index, bool(indirect)))
    candidates: dict[str, list[str]] = {}
    for index, member in enumerate(kernel.members):
        if member.store_indirect or (
            not pure
            and (
                member.level == "reduction"
                or member.node.reduction_type is not None
                or member.store_mode is not None
            )
        ):
            continue
        target = member.node.storage
        for name, uses in loads.items():
            info = program.storages[name]
            if name == target or name in kernel.local_buffers:
                continue
            if info.is_input:
                if name not in donated or input_last_use.get(name) != position:
                    continue
                declared = info.declared
                if declared is None or declared.offset != 0:
                    continue
            elif last_use.get(name) != position:
                continue
            if all(
                not indirect
                and where == index
                and sympy.expand(sympy.sympify(load_index) - member.store_index) == 0
                for where, load_index, indirect in uses
            ):
                candidates.setdefault(target, []).append(name)
    return candidates


def _take_in_place(
    name: str,
    layout: Layout,
    candidates: dict[str, list[str]],
    groups: Mapping[str, str],
    members: Mapping[str, list[str]],
    program: Program,
) -> str | None:
    for donor in candidates.get(name, []):
        root = groups[donor]
        if len(members[root]) != 1 or not _compatible(layout, donor, program):
            continue
        for others in candidates.values():  # one donor per kernel
            if donor in others:
                others.remove(donor)
        return donor
    return None


__all__ = ["BLOCK_BUFFER_LIMIT", "Allocation", "MemoryPlan", "plan_memory", "returns_fresh"]
