"""Horizontal launches: pointwise kernels that read only the Graph's inputs, as one launch.

Under autocast a transformer casts each layer's weights and biases to bf16 every step, and
fusion joins only the casts of one size: GPT-2 small's inference launches 74 such kernels of
its 133 (`benchmarks/launch_census.py`), each a launch of several microseconds of host time
for microseconds or less of GPU work. They read nothing the step computes, so they can run
earlier, together. `launch_horizontally` groups them, in schedule order, into
`HorizontalKernel`s placed where their first part stood: one launch whose programs each run
one part (the Triton backend's `codegen/triton/horizontal.py`).

A part moves up only past items that neither write what it reads or writes nor read what it
writes (an input's copy-back, a batch norm's running statistics, stays behind it). A group
closes at `BUDGET_BYTES` of outputs or `WINDOW` scheduled items from its first part: moving
a cast up stretches its buffer's lifetime, so a group stays within about a layer (GPT-2
small's weights are 14 MB a layer in bf16) and the planned peak barely moves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import sympy

from ember.inductor.ir.program import Program
from ember.inductor.scheduler.fusion import Kernel, ScheduledNode, _touches

BUDGET_BYTES = 16 * 2**20  # outputs of one group
WINDOW = 32  # scheduled items from a group's first part to its last


@dataclass
class HorizontalKernel(Kernel):
    """Kernels over different loops launched as one: each program runs one of `parts`. Its
    members are the parts' members (what memory planning and ordering read); each part
    keeps its own loops (`outer`), which the bounds check and the code generator use."""

    parts: list[Kernel] = field(default_factory=list)


def horizontal(parts: Sequence[Kernel], name: str) -> HorizontalKernel:
    """One kernel running `parts` side by side."""
    members = [member for part in parts for member in part.members]
    local = set().union(*(part.local_buffers for part in parts))
    return HorizontalKernel(name, (), (), members, local, list(parts))


def reads_only_inputs(kernel: Kernel, program: Program) -> bool:
    """Whether `kernel` is a static pointwise kernel that loads only Graph inputs (and its
    own register values) and stores only new buffers: it could run first in the step."""
    if type(kernel) is not Kernel or kernel.inner or not kernel.members:
        return False
    if any(sympy.sympify(size).free_symbols for size in kernel.outer):
        return False
    for member in kernel.members:
        if member.level != "outer" or member.node.reduction_type is not None:
            return False
        if member.store_mode is not None or member.store_indirect:
            return False
        if program.storages[member.node.storage].is_input:
            return False  # a copy-back into an input keeps its place
        for load in member.loads():
            storage, _, indirect = load.args
            name = str(storage)
            if indirect or not (program.storages[name].is_input or name in kernel.local_buffers):
                return False
    return True


def launch_horizontally(
    program: Program,
    scheduled: Sequence[ScheduledNode],
    eligible: Callable[[Kernel], bool],
) -> list[ScheduledNode]:
    """`scheduled` with each group of two or more kernels that read only inputs (and that
    `eligible`, the backend, can run as a part) made one `HorizontalKernel` at the first
    part's position; the kernel is named after that part."""
    budget_bytes, window = BUDGET_BYTES, WINDOW
    items = list(scheduled)
    groups: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for position, item in enumerate(items):
        if not isinstance(item, Kernel) or not reads_only_inputs(item, program):
            continue
        if not eligible(item):
            continue
        size = _output_bytes(item, program)
        fits = (
            current
            and current_bytes + size <= budget_bytes
            and position - current[0] <= window
            and _movable(items, current[0], position)
        )
        if not fits:
            if len(current) > 1:
                groups.append(current)
            current, current_bytes = [], 0
        current.append(position)
        current_bytes += size
    if len(current) > 1:
        groups.append(current)
    merged: dict[int, HorizontalKernel] = {}
    dropped: set[int] = set()
    for group in groups:
        parts = [items[p] for p in group]
        assert all(isinstance(part, Kernel) for part in parts)
        first = parts[0]
        assert isinstance(first, Kernel)
        name = first.name.replace("_fused_", "_horizontal_", 1)
        merged[group[0]] = horizontal([p for p in parts if isinstance(p, Kernel)], name)
        dropped.update(group[1:])
    return [
        merged.get(position, item) for position, item in enumerate(items) if position not in dropped
    ]


def _movable(items: Sequence[ScheduledNode], to: int, position: int) -> bool:
    """Whether the kernel at `position` can run at `to` (earlier, beside the kernel there):
    nothing from `to` on writes what it reads or writes, or reads what it writes (parts of
    one launch run in no order)."""
    reads, writes = _touches(items[position])
    for item in items[to:position]:
        item_reads, item_writes = _touches(item)
        if item_writes & (reads | writes) or item_reads & writes:
            return False
    return True


def _output_bytes(kernel: Kernel, program: Program) -> int:
    total = 0
    for member in kernel.members:
        if member.node.storage in kernel.local_buffers:
            continue
        storage = program.storages[member.node.storage]
        layout = storage.layout or storage.declared
        if layout is None:
            continue
        elements = 1
        for size in layout.size:
            elements *= int(size)
        total += elements * storage.dtype.itemsize
    return total
