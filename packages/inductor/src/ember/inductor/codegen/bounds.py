"""The check every scheduled kernel passes before code is generated for it: each load and
store index stays inside its storage (see `ir/bounds.py`). An index that leaves it is a
compiler bug that would corrupt memory or crash the device ("an illegal memory access was
encountered", after which the CUDA context is dead), so it stops the compile instead, naming
the kernel, the access and the user's lines.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy

from ember.inductor.errors import OutOfBoundsError
from ember.inductor.ir.bounds import OutOfBounds, accesses, out_of_bounds, storage_extent
from ember.inductor.ir.indexing import Expr, index_var
from ember.inductor.ir.program import Program
from ember.inductor.scheduler.fusion import Kernel, ScheduledNode
from ember.inductor.scheduler.horizontal import HorizontalKernel


def kernel_violations(
    kernel: Kernel, program: Program, extents: dict[str, int | None] | None = None
) -> list[OutOfBounds]:
    """The accesses of `kernel` proven to leave their storage (`extents`: `program_extents`,
    computed once for every kernel of the program)."""
    ranges: dict[sympy.Symbol, Expr] = {}
    for position, size in enumerate(kernel.outer):
        ranges[index_var("x", position)] = size
    for position, size in enumerate(kernel.inner):
        ranges[index_var("r", position)] = size
    local = kernel.local_buffers  # held in registers: never addressed
    found: list[OutOfBounds] = []
    if extents is None:
        extents = program_extents(program)
    for member in kernel.members:
        trees = [member.body, *(value for _, value in member.store_indirect)]
        stores = [(member.node.storage, member.store_index)]
        used = accesses(trees, [s for s in stores if s[0] not in local])
        found += out_of_bounds([a for a in used if a.storage not in local], ranges, extents)
    return found


def program_extents(program: Program) -> dict[str, int | None]:
    """Elements each storage of `program` holds (those it does not bound left out)."""
    return {
        name: storage_extent(storage)
        for name, storage in program.storages.items()
        if name not in program.unbounded
    }


def check_bounds(scheduled: Sequence[ScheduledNode], program: Program) -> None:
    """Raise `OutOfBoundsError` for the first kernel with an access outside its storage."""
    extents = program_extents(program)  # once, not once a kernel (Swin: 83,000 storages read)
    for item in scheduled:
        if not isinstance(item, Kernel):
            continue
        # a horizontal launch's parts run over loops of their own
        parts = item.parts if isinstance(item, HorizontalKernel) else [item]
        violations = [v for part in parts for v in kernel_violations(part, program, extents)]
        if not violations:
            continue
        lines = dict.fromkeys(line for m in item.members for line in m.node.sources)
        where = "".join(f"\n  {line}" for line in lines) or " (no user line recorded)"
        details = "".join(f"\n  {v.describe()}" for v in violations[:4])
        raise OutOfBoundsError(
            f"ember-inductor generated kernel {item.name} with an index outside its memory:"
            f"{details}\nIt computes:{where}\nThis is a compiler bug; please report it with "
            "this message. Meanwhile compile this model with backend='aot_eager', or set "
            "EMBER_INDUCTOR_CHECK_BOUNDS=0 to run the kernel unchecked."
        )
