"""`NativeLaunch`: what the native wrapper needs to launch a compiled GPU kernel itself.

A kernel object that can hand its loaded function to C++ (`CubinKernel`, a bound
`TritonKernel`) describes it with one of these; the interpreter then packs the arguments and
calls `cuLaunchKernel` as the kernel's own Python fast path would. Kernels that cannot (CPU
kernels, autotuned or interpreted Triton kernels, kernels needing scratch memory) give None
and are called back in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# a parameter's one-letter code in the interpreter (`write_scalar`): 'P' is a pointer
_CODES: dict[str, str] = {
    "i1": "b",
    "i8": "b",
    "u1": "B",
    "u8": "B",
    "i16": "h",
    "u16": "H",
    "i32": "i",
    "u32": "I",
    "i64": "q",
    "u64": "Q",
    "fp32": "f",
    "fp64": "d",
}


@dataclass(frozen=True)
class NativeLaunch:
    """A loaded kernel function and its launch: grid `cdiv(numel, block)`, `threads` per
    program, `shared` bytes of dynamic shared memory, one code per parameter."""

    function: int  # the CUfunction's address
    block: int
    threads: int
    shared: int
    codes: str


def parameter_codes(kinds: Sequence[str]) -> str | None:
    """The interpreter's codes of a signature's types (None: a type it cannot pass)."""
    codes = []
    for kind in kinds:
        if kind.startswith("*"):
            codes.append("P")
        elif kind in _CODES:
            codes.append(_CODES[kind])
        else:
            return None
    return "".join(codes)
