"""Expensive row values a reduction computes and a later loop over the row needs again.

A softmax's sum loop computes `exp(x - max)` for every element of the row, and its output
loop computes the same `exp(x - max)` again to divide it by the sum: half its exponentials
are repeats. When a sum's body and a later inner loop's or later sum's body of the same
kernel share a subtree holding a transcendental op or a random draw, the first sum's loop
saves the subtree's values in a row-long scratch array on the thread's stack (as long as the
longest row a symbolic size allows) and the later loops read them back: a layer norm after
dropout and a residual add (BERT's) drew each dropout number three times, for the mean, the
variance and the output. The values are the very ones computed once, so results are
unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import sympy

from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.indexing import largest
from ember.inductor.scheduler.fusion import Kernel

# Ops worth a store and a load to skip (vector math library calls, Philox's ten rounds).
EXPENSIVE = frozenset(
    {
        "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "erf", "erfc",
        "sin", "cos", "tan", "sinh", "cosh", "atan", "pow", "random",
    }
)  # fmt: skip
# Longest row kept in scratch: 64 KiB of float32 per thread on the stack.
MAX_ROW = 16384

Structure = tuple[object, ...]


def structure(node: BodyValue) -> Structure:
    """A key equal for trees that compute the same value in the same loop iteration.
    Indirect loads never match (their indices are values of the body)."""
    if node.op == "load":
        storage, index, indirect = node.args
        if indirect:
            return ("indirect", id(node))
        return ("load", str(storage), str(index), node.dtype)
    args = tuple(
        structure(a) if isinstance(a, BodyValue) else str(a) if isinstance(a, sympy.Basic) else a
        for a in node.args
    )
    return (node.op, args, node.dtype)


def subtrees(node: BodyValue) -> Iterator[BodyValue]:
    yield node
    for child in node.children():
        yield from subtrees(child)


def _expensive(node: BodyValue) -> bool:
    return any(n.op in EXPENSIVE for n in subtrees(node))


def _stored(node: BodyValue) -> set[str]:
    return {str(n.args[0]) for n in subtrees(node) if n.op == "load"}


def row_capacity(size: sympy.Expr, ranges: Mapping[str, tuple[int, int | None]]) -> int | None:
    """How many values a scratch row of `size` holds: the size, or for a symbolic one the
    largest its symbols' ranges allow (None when unbounded or past `MAX_ROW`)."""
    capacity = largest(size, ranges)
    return capacity if capacity is not None and capacity <= MAX_ROW else None


def shared_rows(
    kernel: Kernel, ranges: Mapping[str, tuple[int, int | None]]
) -> dict[Structure, str]:
    """Subtrees (by `structure`) a sum reduction over one row (of at most `MAX_ROW` values,
    a symbolic row by its symbols' `ranges`) computes and a later inner loop or sum of the
    kernel recomputes, each with the name of its scratch array."""
    if not kernel.outer or len(kernel.inner) != 1:
        return {}
    if row_capacity(kernel.inner[0], ranges) is None:
        return {}
    shared: dict[Structure, str] = {}
    members = kernel.members
    for position, member in enumerate(members):
        if member.level != "reduction" or member.node.reduction_type != "sum":
            continue
        written = {m.node.storage for m in members[position:]}
        later: set[Structure] = set()
        for other in members[position + 1 :]:
            a_sum = other.level == "reduction" and other.node.reduction_type == "sum"
            if (other.level == "inner" or a_sum) and not other.store_mode:
                later.update(structure(n) for n in subtrees(other.body))
        # the largest shared subtrees: a parent taken first hides its children
        candidates = [member.body]
        while candidates:
            node = candidates.pop()
            if node.op == "masked":
                continue  # its values live inside the mask's branch
            key = structure(node)
            if key in later and _expensive(node) and not (_stored(node) & written):
                shared.setdefault(key, f"row{len(shared)}")
                continue
            candidates.extend(node.children())
    return shared
