"""Accumulating stores (`+=` of a scatter-add) in a kernel that runs on one thread.

A scatter-add lowers to `out[index] += value` under `#pragma omp atomic`, and a loop holding
one is not vectorized. Where the kernel opens no parallel region (its size is known to be
below `PARALLEL_THRESHOLD`), nothing else writes the storage meanwhile: the `+=` needs no
atomicity, and GCC's atomic float add is a compare-and-swap loop per element (an embedding's
backward, BERT's 128 tokens x 128 features, ran 32768 of them a training step). The store is
then a plain `+=`, and the innermost loop is a SIMD loop when its lanes add into distinct
elements: the index's indirect part (the token's row) does not change along the loop and the
loop variable itself moves the index (the feature).

A kernel large enough for threads gets a twin of its loops for a run on one thread
(`omp_get_max_threads() == 1`, which `torch.set_num_threads(1)` sets: the suite's CPU runs),
written as for a kernel that opens no region; the threaded loops keep their atomics. A
max-pool's backward in small_cnn adds 32768 gradients a call this way.
"""

from __future__ import annotations

import sympy

from ember.inductor.ir.body import BodyValue, walk
from ember.inductor.scheduler.fusion import Kernel, Member


def one_thread_twin(kernel: Kernel) -> bool:
    """Whether a threaded pointwise `kernel` gets loops of its own for one thread: it
    accumulates."""
    return not kernel.inner and any(m.store_mode == "atomic_add" for m in kernel.members)


def lanes_accumulate_apart(kernel: Kernel, variable: sympy.Symbol) -> bool:
    """Whether every accumulating store of `kernel` adds, across the iterations of a loop
    over `variable` at one point of the other loops, into distinct elements, with no member
    reading a storage being accumulated into (lanes would read it before others add)."""
    accumulating = [m for m in kernel.members if m.store_mode is not None]
    targets = {m.node.storage for m in accumulating}
    for member in kernel.members:
        for load in member.loads():
            if str(load.args[0]) in targets:
                return False
    return all(_apart(member, variable) for member in accumulating)


def _apart(member: Member, variable: sympy.Symbol) -> bool:
    if member.store_mode != "atomic_add":
        return False
    for _, chosen in member.store_indirect:
        if _reads(chosen, variable):
            return False
    index = sympy.expand(member.store_index)
    coefficient = index.coeff(variable)
    rest = sympy.expand(index - coefficient * variable)
    return coefficient.is_Integer and coefficient != 0 and variable not in rest.free_symbols


def _reads(tree: BodyValue, variable: sympy.Symbol) -> bool:
    """Whether a value may change along `variable` (an index that reads it, a draw)."""
    for value in walk(tree):
        if value.op == "random":
            return True
        for arg in value.args:
            if isinstance(arg, sympy.Expr) and variable in arg.free_symbols:
                return True
            if isinstance(arg, tuple) and arg:  # a load's indirect symbols: reads memory
                return True
    return False
