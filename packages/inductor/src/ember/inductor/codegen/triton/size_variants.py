"""Specialized bodies of a Triton kernel over symbolic sizes, chosen inside the kernel.

A size passed as an argument hides what a static kernel's literals tell Triton: that a row
starts at a multiple of 16 elements (so loads and stores are 16-byte vectors) and that every
index fits int32. The GPT-2 softmax over a symbolic length loaded bf16 one element at a time,
in int64 (sm_90 PTX: 17 int64 divisions a thread for its rows' coordinates), on tiles of the
length's bound (256) at any length: 5-9x a static kernel's GPU time on the H100. A kernel with sizes therefore opens with branches on its sizes' run-time values:

    if (s1 % 16 == 0) & (<every extent> <= 2**30) & (s1 <= RBLOCK // 4):
        s1_k = (s1.to(tl.int32) // 16) * 16      # the same value, divisible by 16 to Triton
        <the body on [XBLOCK, RBLOCK // 4] tiles, int32 indices>
        return
    if (s1 % 16 == 0) & (<every extent> <= 2**30):
        <the body, int32 indices, aligned sizes>
        return
    if <every extent> <= 2**30:
        <the body, int32 indices>
        return
    <the general body, as before>

The condition is uniform across a launch, so each launch runs one body; the general body keeps
every size correct. Sizes tested for divisibility are those the kernel's addresses, reduction
length or (pointwise) element count read. Narrower tiles apply to a persistent reduction over
a symbolic length (tiles of its bound, masked at run time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from ember.inductor.codegen.triton.printer import triton_index
from ember.inductor.ir.indexing import Expr

ALIGNMENT = 16  # elements: 16-byte vectors of 1-byte values, 32-byte of bf16
INT32_SAFE = 2**30  # an index under half int32's range also fits every masked lane beside it
NARROW_FACTORS = (16, 4)  # a bounded tile also runs at RBLOCK // 16 and RBLOCK // 4
NARROWEST_RBLOCK = 16


@dataclass(frozen=True)
class Specialization:
    """One specialized body: sizes renamed to int32 locals (aligned ones divisible by
    `ALIGNMENT` to Triton), tiles `rblock_divisor` times narrower along the reduction."""

    aligned: frozenset[str] = frozenset()
    rblock_divisor: int = 1
    renames: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def rblock(self) -> str:
        return "RBLOCK" if self.rblock_divisor == 1 else f"(RBLOCK // {self.rblock_divisor})"


def plan(
    sizes: set[str], aligned: set[str], narrowable: bool, rblock: int | None
) -> list[Specialization]:
    """The specialized bodies of a kernel with `sizes` (none without), in the order they are
    tested: the narrow aligned tiles (the narrowest that holds the length), the full aligned
    tile, then the full tile with int32 indices only (a length of 100)."""
    if not sizes:
        return []
    renames = {name: f"{name}_k" for name in sorted(sizes)}
    chosen = frozenset(aligned)
    divisors = [1]
    if narrowable and rblock is not None:
        divisors = [d for d in NARROW_FACTORS if rblock // d >= NARROWEST_RBLOCK] + divisors
    specials = [Specialization(chosen, d, renames) for d in divisors]
    if chosen:  # a length that is not a multiple of 16 still takes int32 indices
        specials.append(Specialization(frozenset(), 1, renames))
    return specials


def condition(special: Specialization, limits: list[Expr], rnumel: Expr) -> str:
    """The test a launch's sizes pass to run `special`'s body: aligned sizes divisible,
    every extent (and size) under `INT32_SAFE`, the reduction length within the tile."""
    parts = [f"({name} % {ALIGNMENT} == 0)" for name in sorted(special.aligned)]
    parts += [f"({triton_index(limit)} <= {INT32_SAFE})" for limit in limits]
    if special.rblock_divisor > 1:
        parts.append(f"({triton_index(rnumel)} <= {special.rblock})")
    return " & ".join(parts) if parts else "True"


def size_locals(special: Specialization) -> list[str]:
    """The int32 sizes a specialized body reads (an aligned one rounded down to its own value
    so that Triton's analysis sees a multiple of `ALIGNMENT`)."""
    lines = []
    for name, local in special.renames.items():
        if name in special.aligned:
            lines.append(f"{local} = ({name}.to(tl.int32) // {ALIGNMENT}) * {ALIGNMENT}")
        else:
            lines.append(f"{local} = {name}.to(tl.int32)")
    return lines


def renamed(expr: Expr, renames: dict[str, str]) -> Expr:
    """`expr` with its size symbols replaced by the specialized body's locals (assumptions
    kept: the printer rounds Mod and floor by them)."""
    if not renames:
        return expr
    expr = sympy.sympify(expr)
    table = {
        s: sympy.Symbol(renames[str(s)], **s.assumptions0)
        for s in expr.free_symbols
        if str(s) in renames
    }
    return expr.xreplace(table) if table else expr


def static_factor_aligned(expr: Expr) -> bool:
    """Whether an element count is a multiple of `ALIGNMENT` whatever its sizes (`64*s0*s1`)."""
    coefficient, _ = sympy.sympify(expr).as_coeff_Mul()
    return coefficient.is_Integer and int(coefficient) % ALIGNMENT == 0


def misaligning_sizes(address: Expr, reduces: bool) -> set[str]:
    """The sizes whose alignment decides whether `address` is a multiple of `ALIGNMENT` along
    a vector: those in a term whose coefficient is not such a multiple (`768*s1*x0` never
    misaligns, `s1*x0` may). A reduction's tiles are contiguous along r, so there only an
    address that reads an r variable counts (one without is read once a row)."""
    expr = sympy.expand(sympy.sympify(address))
    names = {str(s) for s in expr.free_symbols}
    if reduces and not any(n[0] == "r" and n[1:].isdigit() for n in names):
        return set()
    found: set[str] = set()
    for term in sympy.Add.make_args(expr):
        coefficient, _ = term.as_coeff_Mul()
        if coefficient.is_Integer and int(coefficient) % ALIGNMENT == 0:
            continue
        found |= {str(s) for s in term.free_symbols}
    return found
