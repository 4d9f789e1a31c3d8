"""CUDA's `erff` as straight-line Triton for a GEMM template's epilogue (GELU's erf).

libdevice's `__nv_erff` (what eager's CUDA GELU and Triton's `libdevice.erf` compute) runs one
degree-6 polynomial whose seven coefficients it picks per element: an odd series in x^2 below
|x| = 1.00296, else a tail `1 - exp2(p(|x|) * |x| + |x|)`-style formula. Picking coefficients
per element is two moves each; on a 128x256 tile at 8 warps (128 values a thread) the
coefficient moves were a third of what the fused GELU added to the product (1,484 of 4,360
SASS instructions a thread) and the kernel spilled. `erf_lines` evaluates both polynomials
with constant coefficients (fmas with immediates) and selects: the same fmas in the same
order and the same `ex2.approx.ftz`, so the same float32 bits, except for subnormal inputs,
which libdevice's flush-to-zero fmas return as 0 and these return as eager's CUDA `erff`
does (about 1.128 x).
"""

from __future__ import annotations

from collections.abc import Callable

# libdevice's coefficients, highest degree first (float32 values, written exactly)
SMALL = (
    8.483494457323104e-05, -0.0008213091641664505, 0.005213488824665546, -0.026868773624300957,
    0.11284004896879196, -0.37612664699554443, 0.12837915122509003,
)  # fmt: skip
TAIL = (
    1.6425845387857407e-05, -0.0004680210549850017, 0.0052647641859948635, -0.034303076565265656,
    0.1532936990261078, 0.9163130521774292, 0.6282998323440552,
)  # fmt: skip
# |x| at and above which libdevice takes the tail formula (float32 0x3F8060FE)
TAIL_FROM = 1.002959966659546


def _constant(value: float) -> str:
    return f"tl.full([1], {value!r}, tl.float32)"


def _polynomial(variable: str, coefficients: tuple[float, ...], result: str) -> list[str]:
    """Horner's rule by fmas, as libdevice orders them."""
    first, second, *rest = coefficients
    lines = [f"{result} = tl.fma({_constant(first)}, {variable}, {_constant(second)})"]
    lines += [f"{result} = tl.fma({result}, {variable}, {_constant(c)})" for c in rest]
    return lines


def erf_lines(x: str, fresh: Callable[[], str]) -> tuple[list[str], str]:
    """Lines computing libdevice's `erff` of the float32 block `x`; the variable they set."""
    size, square, small, series = fresh(), fresh(), fresh(), fresh()
    tail_poly, tail, result = fresh(), fresh(), fresh()
    lines = [f"{size} = tl.abs({x})", f"{square} = {x} * {x}"]
    lines += _polynomial(square, SMALL, small)
    lines.append(f"{series} = tl.fma({small}, {x}, {x})")
    lines += _polynomial(size, TAIL, tail_poly)
    lines.append(f"{tail_poly} = tl.fma({tail_poly}, -{size}, -{size})")
    # 1 - exp2(.) with x's sign (the difference is never negative: an or of the sign bit)
    lines.append(
        f"{tail} = ((1.0 - tl.exp2({tail_poly})).to(tl.uint32, bitcast=True) | "
        f"({x}.to(tl.uint32, bitcast=True) & 0x80000000)).to(tl.float32, bitcast=True)"
    )
    lines.append(f"{result} = tl.where({size} >= {TAIL_FROM!r}, {tail}, {series})")
    return lines, result


__all__ = ["erf_lines"]
