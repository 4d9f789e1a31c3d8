"""Values a kernel's loops over a row read at one place of the row: read once, before them.

A load whose index has no reduction variable (a cross-entropy's label and its gradient for
the row, a layer norm's saved mean) reads the same element in every iteration of the row's
loops, but GCC 12 cannot hoist it when the loop stores through another `float*` that might
alias it, and then treats it as varying: the select `r == label ? grad : 0` of BERT's
log-softmax backward became control flow ("control flow in loop") and the whole kernel,
`exp` included, ran scalar (4.8 ms a training step for 128x1024 values). Such loads of
storages the kernel never writes are emitted once per row, before its loops, and the loops
read the variable (the kernel's common-subexpression scopes find it). A value the kernel
stores for the row before its loops (a log-softmax's max and sum) is forwarded the same way
by `CppKernel._store`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

from ember.inductor.codegen.cpp.byte_rows import unmasked_loads

if TYPE_CHECKING:
    from ember.inductor.codegen.cpp.kernel import CppKernel


def hoist_row_invariant_loads(cpp: CppKernel) -> None:
    """At one point of the kernel's outer loops, before its row loops: emit every load of
    a row loop's body that reads no reduction variable from a storage the kernel does not
    write."""
    kernel = cpp.kernel
    if not kernel.inner:
        return
    written = {m.node.storage for m in kernel.members} | set(kernel.local_buffers)
    for member in kernel.members:
        if member.level == "outer":
            continue
        for load in unmasked_loads(member.body):
            storage, index, indirect = load.args
            if indirect or str(storage) in written or not isinstance(index, sympy.Expr):
                continue
            if any(_is_reduction_variable(symbol) for symbol in index.free_symbols):
                continue
            cpp.value(load, {})


def _is_reduction_variable(symbol: sympy.Basic) -> bool:
    name = str(symbol)
    return name[0] == "r" and name[1:].isdigit()
