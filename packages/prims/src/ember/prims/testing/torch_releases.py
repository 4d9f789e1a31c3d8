"""Behaviours of other torch releases, reproduced on the installed one for tests.

CI has one torch; the GPU machine may run another (2.11 there, 2.13 here), whose C++
composites treat symbolic sizes differently. A context here swaps in that release's
behaviour, so a test fails on CI the way the other release fails.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ember.prims.tracer.symbolic_composites import matmul as batched_matmul


@contextmanager
def matmul_reading_concrete_sizes() -> Iterator[None]:
    """`aten::matmul` decomposed as torch 2.11's C++ does it: reading `sizes()`, which turns
    every symbolic size of a traced operand into its hint (a guard `s0 == 16`). Values are
    torch's."""
    library = torch.library.Library("aten", "IMPL")

    def matmul(left: torch.Tensor, right: torch.Tensor) -> Any:
        for size in (*left.shape, *right.shape):
            int(size)  # what sizes() does to a symbolic size
        if left.dim() > 2 or right.dim() > 2:
            return batched_matmul(left, right)
        if left.dim() == 1:
            return left.dot(right) if right.dim() == 1 else left.unsqueeze(0).mm(right)[0]
        return left.mv(right) if right.dim() == 1 else left.mm(right)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        library.impl("matmul", matmul, "CompositeImplicitAutograd")
    try:
        yield
    finally:
        library._destroy()
