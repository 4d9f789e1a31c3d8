"""Index arithmetic: floor division and modular indexing simplify exactly when ranges prove it."""

from __future__ import annotations

import itertools

import sympy

from ember.inductor.ir.indexing import (
    FloorDiv,
    ModularIndexing,
    index_var,
    largest,
    simplify_with_ranges,
    unflatten,
)

x0, x1 = index_var("x", 0), index_var("x", 1)


def _values(expr: sympy.Expr, ranges: dict[sympy.Symbol, int]) -> list[int]:
    symbols = list(ranges)
    return [
        int(sympy.sympify(sympy.sympify(expr).xreplace(dict(zip(symbols, point)))).doit())
        for point in itertools.product(*(range(n) for n in ranges.values()))
    ]


def test_reshape_round_trip_simplifies_to_the_flat_index() -> None:
    ranges = {x0: 256, x1: 512}
    # a (4, 64, 512) tensor read through a (256, 512) view: flat index x1 + 512*x0
    flat = x1 + 512 * x0
    parts = unflatten(flat, [sympy.Integer(4), sympy.Integer(64), sympy.Integer(512)])
    index = 32768 * parts[0] + 512 * parts[1] + parts[2]
    simplified = simplify_with_ranges(index, {k: sympy.Integer(v) for k, v in ranges.items()})
    assert simplified == flat


def test_simplification_keeps_values() -> None:
    ranges = {x0: 6, x1: 5}
    sizes = {k: sympy.Integer(v) for k, v in ranges.items()}
    for expr in (
        FloorDiv(x1 + 5 * x0, 5),
        ModularIndexing(x1 + 5 * x0, 1, 5),
        ModularIndexing(x1 + 5 * x0, 5, 3),
        FloorDiv(x1 + 5 * x0, 10),
        FloorDiv(x1 + 5 * x0, 3),
    ):
        assert _values(simplify_with_ranges(expr, sizes), ranges) == _values(expr, ranges)


def test_nested_remainders_and_quotients_simplify() -> None:
    """Llama's saved logits read as (8192, 32000) through a (8, 1024, 32000) view inside a
    kernel over (x0 < 8192, r0 < 32000): the remainder of a remainder, and a quotient of a sum
    whose terms are bounded by remainders, are exact."""
    ranges = {x0: sympy.Integer(8192), x1: sympy.Integer(32000)}
    inner = ModularIndexing(x1, 1, 32000) + 32000 * ModularIndexing(x0, 1, 1024)
    index = (
        32768000 * FloorDiv(x0, 1024)
        + 32768000 * FloorDiv(inner, 32768000)
        + 32000 * ModularIndexing(FloorDiv(inner, 32000), 1, 1024)
        + ModularIndexing(ModularIndexing(x1, 1, 32000), 1, 32000)
    )
    assert simplify_with_ranges(index, ranges) == x1 + 32000 * x0
    small = {x0: 6, x1: 5}
    sizes = {k: sympy.Integer(v) for k, v in small.items()}
    for expr in (
        ModularIndexing(ModularIndexing(x1, 1, 5), 1, 5) + x0,
        FloorDiv(x1 + 5 * ModularIndexing(x0, 1, 3), 15),
        FloorDiv(ModularIndexing(x0, 1, 4) + 4 * x1, 4),
    ):
        simplified = simplify_with_ranges(expr, sizes)
        assert not simplified.has(FloorDiv, ModularIndexing), simplified
        assert _values(simplified, small) == _values(expr, small)


def test_a_sum_within_one_period_drops_its_floor() -> None:
    """The odd corner of a 2x2 max pooling window over a 32x32 plane, output (x0 < 16,
    x1 < 16): its row is `(33 + 2*x1 + 64*x0) // 32 % 32` and its column `(33 + 2*x1) % 32`.
    The terms that are not multiples of 32 stay in [32, 64), so the quotient is exact and
    each remainder is the value less one period; generated C++ left these divisions in and
    the loop that read them ran 48x slower (1.16 ms against 24 us, one core, small_cnn)."""
    ranges = {x0: 16, x1: 16}
    sizes = {k: sympy.Integer(v) for k, v in ranges.items()}
    index = 32 * ModularIndexing(33 + 2 * x1 + 64 * x0, 32, 32) + ModularIndexing(
        33 + 2 * x1, 1, 32
    )
    simplified = simplify_with_ranges(index, sizes)
    assert simplified == 33 + 2 * x1 + 64 * x0, simplified
    small = {x0: 6, x1: 5}
    small_sizes = {k: sympy.Integer(v) for k, v in small.items()}
    for expr in (
        FloorDiv(7 + x1 + 10 * x0, 5),  # 7 + x1 in [7, 11]: not within one period, stays
        FloorDiv(5 + x1 + 10 * x0, 5),
        ModularIndexing(13 + x1, 1, 9),  # [13, 17] within [9, 18)
        ModularIndexing(13 + x1 + 18 * x0, 1, 9),
        ModularIndexing(3 + 2 * x1 + 8 * x0, 4, 3),
    ):
        assert _values(simplify_with_ranges(expr, small_sizes), small) == _values(expr, small)
    assert not simplify_with_ranges(FloorDiv(5 + x1 + 10 * x0, 5), small_sizes).has(FloorDiv)
    assert simplify_with_ranges(FloorDiv(7 + x1 + 10 * x0, 5), small_sizes).has(FloorDiv)


def test_division_that_ranges_cannot_prove_stays() -> None:
    expr = FloorDiv(x1 + 5 * x0, 3)
    assert simplify_with_ranges(expr, {x0: sympy.Integer(6), x1: sympy.Integer(5)}).has(FloorDiv)


def _truncating(expr: sympy.Expr, point: dict[sympy.Symbol, int]) -> int:
    """`expr` at `point` as generated code computes it: C's `/` and `%` truncate."""
    if expr.is_Integer:
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        return point[expr]
    args = [_truncating(a, point) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return sum(args)
    if isinstance(expr, sympy.Mul):
        result = 1
        for a in args:
            result *= a
        return result
    quotient = int(args[0] / args[1])  # truncates toward zero
    if isinstance(expr, FloorDiv):
        return quotient
    assert isinstance(expr, ModularIndexing)
    return int(quotient - args[2] * int(quotient / args[2]))


def test_rewrites_never_leave_a_negative_operand_for_truncating_code() -> None:
    """A rolled window read (Swin): row `i - 2` and column `j - 2` of an (8, 8, 3) tensor
    viewed as (2, 4, 2, 4, 3) windows, read where i, j >= 2 (a cat's mask). Dropping the
    multiple `24*i` from `(24*i + 3*j + c - 54) // 3 % 4` is exact in floor arithmetic but
    leaves a negative operand, and C's remainder of it reads before the buffer."""
    i, j, c = index_var("x", 0), index_var("x", 1), index_var("x", 2)
    flat = 24 * (i - 2) + 3 * (j - 2) + c
    parts = unflatten(sympy.expand(flat), [sympy.Integer(n) for n in (2, 4, 2, 4, 3)])
    window_strides = (96, 12, 48, 3, 1)  # the windows' permuted (contiguous) layout
    index = sum((p * s for p, s in zip(parts, window_strides)), sympy.S.Zero)
    for point in itertools.product(range(2, 8), range(2, 8), range(3)):
        at = dict(zip((i, j, c), point))
        expected = int(index.xreplace(at))  # exact (floor) arithmetic on integers
        assert _truncating(index, at) == expected, (point, index)
        assert 0 <= expected < 192
    assert FloorDiv(16 * i + c - 18, 16) != i + FloorDiv(c - 18, 16)
    assert FloorDiv(16 * i + c + 18, 16) == i + FloorDiv(c + 18, 16)


def test_symbolic_sizes_simplify_like_static_ones() -> None:
    # q of a (b, n, 3*128) projection viewed (b, n, 4, 32) and transposed to (b, 4, n, 32):
    # with n symbolic the index kept a `% n` and a `// (128*n)` per load (TinyDecoder's
    # attention ran 1.3-1.8x slower under a symbolic length than static)
    s0, s1 = (
        sympy.Symbol("s0", integer=True, positive=True),
        sympy.Symbol("s1", integer=True, positive=True),
    )
    x2, x3 = index_var("x", 2), index_var("x", 3)
    flat = x3 + 32 * x1 + 128 * x2 + 128 * s1 * x0
    parts = unflatten(flat, [s0, s1, sympy.Integer(128)])
    index = 384 * s1 * parts[0] + 384 * parts[1] + parts[2]
    ranges = {x0: s0, x1: sympy.Integer(4), x2: s1, x3: sympy.Integer(32)}
    simplified = simplify_with_ranges(index, ranges)
    assert simplified == 384 * s1 * x0 + 384 * x2 + 32 * x1 + x3
    for n0, n1 in ((2, 3), (3, 5)):  # and the values agree with the unsimplified index
        sizes = {s0: n0, s1: n1}
        concrete = {x0: n0, x1: 4, x2: n1, x3: 32}
        assert _values(index.xreplace(sizes), concrete) == _values(
            simplified.xreplace(sizes), concrete
        )


def test_a_quotient_by_a_product_of_sizes_divides_by_each_in_turn() -> None:
    """Attention scores (12*s0, s1, s1) viewed (s0, 12, s1, s1) and read flat: the index kept
    `(s1**2*x0 + s1*x1 + x2) // (12*s1**2)` and a remainder beside it, six int64 divisions an
    element (issue 19: 0.35 ms a layer on the H100, and the softmax's last pass left out of
    its reduction kernel); and a (s0*s1, 768) row read through (s0, s1, 768)."""
    s0, s1 = (
        sympy.Symbol("s0", integer=True, positive=True),
        sympy.Symbol("s1", integer=True, positive=True),
    )
    x2 = index_var("x", 2)
    flat = s1**2 * x0 + s1 * x1 + x2
    scores = (
        12 * s1**2 * FloorDiv(flat, 12 * s1**2)
        + s1**2 * ModularIndexing(x0, sympy.S.One, sympy.Integer(12))
        + s1 * x1
        + x2
    )
    ranges = {x0: 12 * s0, x1: s1, x2: s1}
    assert simplify_with_ranges(scores, ranges) == flat
    row = (
        768 * s1 * FloorDiv(768 * x0 + x1, 768 * s1)
        + x1
        + 768 * ModularIndexing(x0, sympy.S.One, s1)
    )
    row_ranges = {x0: s0 * s1, x1: sympy.Integer(768)}
    assert simplify_with_ranges(row, row_ranges) == 768 * x0 + x1
    simplified = simplify_with_ranges(scores, ranges)
    for n0, n1 in ((2, 3), (1, 4)):  # the values agree with the unsimplified index
        sizes = {s0: n0, s1: n1}
        concrete = {x0: 12 * n0, x1: n1, x2: n1}
        assert _values(scores.xreplace(sizes), concrete) == _values(
            simplified.xreplace(sizes), concrete
        )


def test_a_quotient_the_ranges_do_not_prove_keeps_its_floor() -> None:
    s1 = sympy.Symbol("s1", integer=True, positive=True)
    x2 = index_var("x", 2)
    # x2 reaches s1 + 1: the inner division by s1 is not exact
    index = FloorDiv(s1**2 * x0 + s1 * x1 + x2, 12 * s1**2)
    assert simplify_with_ranges(index, {x0: sympy.Integer(24), x1: s1, x2: s1 + 2}).has(FloorDiv)


def test_a_remainder_a_symbolic_range_does_not_prove_stays() -> None:
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    index = ModularIndexing(x0 + 1, sympy.S.One, s0)  # x0 + 1 reaches s0
    assert simplify_with_ranges(index, {x0: s0}) == index


def test_largest_value_of_a_size_under_its_range() -> None:
    s0, s1 = sympy.Symbol("s0", integer=True), sympy.Symbol("s1", integer=True)
    assert largest(4 * s0 * s1, {"s0": (2, 256), "s1": (2, 16)}) == 16384
    assert largest(s0 - 1, {"s0": (2, 256)}) == 255
    assert largest(s0 * s1, {"s0": (2, 256), "s1": (2, None)}) is None
