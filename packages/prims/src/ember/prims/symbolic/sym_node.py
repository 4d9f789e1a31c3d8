"""ember's node behind `torch.SymInt`, `torch.SymFloat` and `torch.SymBool`.

A `SymNode` holds a sympy expression, its Python type, the `ShapeEnv` and the hint (the value
at the example sizes). It implements the protocol c10's PythonSymNodeImpl and torch's
Python-side magic methods call: arithmetic builds new nodes, guarding methods ask the
ShapeEnv, which records a guard whenever the answer depends on the hint.
"""

from __future__ import annotations

import builtins
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import sympy
import torch

from ember.prims.symbolic import layout

if TYPE_CHECKING:
    from ember.prims.symbolic.shape_env import ShapeEnv

Hint = int | float | bool


class SymNode:
    """A symbolic int, float or bool: a sympy expression with a hint, in one ShapeEnv."""

    def __init__(self, expr: sympy.Basic, shape_env: ShapeEnv, pytype: type, hint: Hint) -> None:
        self._expr = expr
        self.shape_env = shape_env
        self.pytype = pytype
        self._hint = hint
        self._expr_version = shape_env.replacements_version

    # ---- what the node stands for -------------------------------------------------------------

    @property
    def expr(self) -> sympy.Basic:
        """The expression, with the substitutions the ShapeEnv has learned since it was made."""
        version = self.shape_env.replacements_version
        if version != self._expr_version:
            self._expr = self.shape_env.replace(self._expr)
            self._expr_version = version
        return self._expr

    @property
    def hint(self) -> Hint:
        return self._hint

    def has_hint(self) -> bool:
        return True

    def is_int(self) -> bool:
        return self.pytype is int

    def is_float(self) -> bool:
        return self.pytype is float

    def is_bool(self) -> bool:
        return self.pytype is bool

    def is_nested_int(self) -> bool:
        return False

    def nested_int(self) -> None:
        return None

    def nested_int_coeff(self) -> None:
        return None

    def is_symbolic(self) -> bool:
        return not self.is_constant()

    def is_constant(self) -> bool:
        # Floats stay symbolic: torch's magic methods only unwrap constant ints and bools.
        if self.pytype is bool:
            return self.expr in (sympy.true, sympy.false)
        return self.pytype is int and bool(self.expr.is_number)

    def maybe_as_int(self) -> int | None:
        expr = self.expr
        return int(expr) if self.pytype is int and expr.is_number else None

    def maybe_as_float(self) -> float | None:
        expr = self.expr
        return float(expr) if self.pytype is float and expr.is_number else None

    def maybe_as_bool(self) -> bool | None:
        expr = self.expr
        return bool(expr) if expr in (sympy.true, sympy.false) else None

    def constant_int(self) -> int | None:
        return self.maybe_as_int()

    def constant_bool(self) -> bool | None:
        return self.maybe_as_bool()

    def wrap(self) -> torch.SymInt | torch.SymFloat | torch.SymBool:
        """The torch.SymInt / SymFloat / SymBool user-facing value for this node."""
        if self.pytype is int:
            return torch.SymInt(self)
        if self.pytype is float:
            return torch.SymFloat(self)
        return torch.SymBool(self)

    def str(self) -> builtins.str:
        return builtins.str(self.expr)

    def _graph_repr(self) -> builtins.str:
        return self.str()

    def __str__(self) -> builtins.str:
        return self.str()

    def __repr__(self) -> builtins.str:
        return f"SymNode({self.expr}, {self.pytype.__name__}, hint={self._hint})"

    # ---- constants and copies -------------------------------------------------------------------

    def wrap_int(self, num: int) -> SymNode:
        return SymNode(sympy.Integer(num), self.shape_env, int, num)

    def wrap_float(self, num: float) -> SymNode:
        return SymNode(sympy.Float(num), self.shape_env, float, num)

    def wrap_bool(self, num: bool) -> SymNode:
        return SymNode(sympy.true if num else sympy.false, self.shape_env, bool, num)

    def clone(self) -> SymNode:
        return self

    def with_shape_env(self, shape_env: ShapeEnv) -> SymNode:
        return SymNode(self.expr, shape_env, self.pytype, self._hint)

    # ---- arithmetic ---------------------------------------------------------------------------

    def add(self, other: SymNode) -> SymNode:
        return self._number(other, operator.add, operator.add)

    def sub(self, other: SymNode) -> SymNode:
        return self._number(other, operator.sub, operator.sub)

    def mul(self, other: SymNode) -> SymNode:
        return self._number(other, operator.mul, operator.mul)

    def mod(self, other: SymNode) -> SymNode:
        _check_divisor(other, "modulo")
        return self._number(other, sympy.Mod, operator.mod)

    def int_floordiv(self, other: SymNode) -> SymNode:
        _check_divisor(other, "integer division")
        return self._binary(other, _floordiv, operator.floordiv, int)

    def floordiv(self, other: SymNode) -> SymNode:
        return self.int_floordiv(other)

    def float_truediv(self, other: SymNode) -> SymNode:
        _check_divisor(other, "division")
        return self._binary(other, operator.truediv, operator.truediv, float)

    def int_truediv(self, other: SymNode) -> SymNode:
        return self.float_truediv(other)

    def truediv(self, other: SymNode) -> SymNode:
        return self.float_truediv(other)

    def pow_by_natural(self, other: SymNode) -> SymNode:
        return self._binary(other, operator.pow, operator.pow, int)

    def float_pow(self, other: SymNode) -> SymNode:
        return self._binary(other, operator.pow, _float_pow, float)

    def pow(self, other: SymNode) -> SymNode:
        return self.float_pow(other)

    def sym_min(self, other: SymNode) -> SymNode:
        return self._number(other, self._min_max(sympy.Min), builtins.min)

    def sym_max(self, other: SymNode) -> SymNode:
        return self._number(other, self._min_max(sympy.Max), builtins.max)

    def sym_sum(self, args: Sequence[SymNode]) -> SymNode:
        nodes = [self._operand(arg) for arg in args]
        pytype = float if any(node.pytype is float for node in nodes) else int
        expr = sympy.Add(*(node.expr for node in nodes))
        return SymNode(expr, self.shape_env, pytype, pytype(sum(node.hint for node in nodes)))

    def lshift(self, other: SymNode) -> SymNode:
        return self._binary(other, lambda a, b: a * 2**b, operator.lshift, int)

    def rshift(self, other: SymNode) -> SymNode:
        return self._binary(other, lambda a, b: sympy.floor(a / 2**b), operator.rshift, int)

    def bitwise_and(self, other: SymNode) -> SymNode:
        return self._specialized(other, operator.and_)

    def bitwise_or(self, other: SymNode) -> SymNode:
        return self._specialized(other, operator.or_)

    def bitwise_xor(self, other: SymNode) -> SymNode:
        return self._specialized(other, operator.xor)

    def neg(self) -> SymNode:
        return self._unary(operator.neg, operator.neg, self.pytype)

    def pos(self) -> SymNode:
        return self

    def abs(self) -> SymNode:
        # Abs is outside the serialized expression set: decide the sign instead.
        if self.shape_env.guard_bool(sympy.Ge(self.expr, 0)):
            return self
        return self.neg()

    def floor(self) -> SymNode:
        if self.pytype is int:
            return self
        return self._unary(sympy.floor, math.floor, int)

    def ceil(self) -> SymNode:
        if self.pytype is int:
            return self
        return self._unary(sympy.ceiling, math.ceil, int)

    def trunc(self) -> SymNode:
        if self.pytype is int:
            return self
        if self.shape_env.guard_bool(sympy.Ge(self.expr, 0)):
            return self.floor()
        return self.ceil()

    def sym_int(self) -> SymNode:
        return self.trunc()

    def round(self, ndigits: int | None = None) -> SymNode:
        value = builtins.round(self.guard_float("", 0), ndigits)
        return self.wrap_int(int(value)) if ndigits is None else self.wrap_float(float(value))

    def sym_float(self) -> SymNode:
        if self.pytype is float:
            return self
        expr = self.expr
        if expr is sympy.true or expr is sympy.false:
            expr = sympy.Integer(int(bool(expr)))
        return SymNode(expr, self.shape_env, float, float(self._hint))

    def is_integer(self) -> SymNode:
        if self.pytype is not float:
            return self.wrap_bool(True)
        return self._unary(lambda a: sympy.Eq(a, sympy.floor(a)), float.is_integer, bool)

    # math functions on SymFloat (torch._sym_sqrt and friends)

    def sym_sqrt(self) -> SymNode:
        return self._float_function(sympy.sqrt, math.sqrt)

    def sym_cos(self) -> SymNode:
        return self._float_function(sympy.cos, math.cos)

    def sym_cosh(self) -> SymNode:
        return self._float_function(sympy.cosh, math.cosh)

    def sym_sin(self) -> SymNode:
        return self._float_function(sympy.sin, math.sin)

    def sym_sinh(self) -> SymNode:
        return self._float_function(sympy.sinh, math.sinh)

    def sym_tan(self) -> SymNode:
        return self._float_function(sympy.tan, math.tan)

    def sym_tanh(self) -> SymNode:
        return self._float_function(sympy.tanh, math.tanh)

    def sym_asin(self) -> SymNode:
        return self._float_function(sympy.asin, math.asin)

    def sym_acos(self) -> SymNode:
        return self._float_function(sympy.acos, math.acos)

    def sym_atan(self) -> SymNode:
        return self._float_function(sympy.atan, math.atan)

    def sym_log2(self) -> SymNode:
        return self._float_function(lambda a: sympy.log(a, 2), math.log2)

    # ---- comparisons and logic ------------------------------------------------------------------

    def eq(self, other: SymNode) -> SymNode:
        return self._compare(other, sympy.Eq, operator.eq)

    def ne(self, other: SymNode) -> SymNode:
        return self._compare(other, sympy.Ne, operator.ne)

    def gt(self, other: SymNode) -> SymNode:
        return self._compare(other, sympy.Gt, operator.gt)

    def lt(self, other: SymNode) -> SymNode:
        return self._compare(other, sympy.Lt, operator.lt)

    def le(self, other: SymNode) -> SymNode:
        return self._compare(other, sympy.Le, operator.le)

    def ge(self, other: SymNode) -> SymNode:
        return self._compare(other, sympy.Ge, operator.ge)

    def sym_and(self, other: SymNode) -> SymNode:
        return self._logic(other, sympy.And, operator.and_)

    def sym_or(self, other: SymNode) -> SymNode:
        return self._logic(other, sympy.Or, operator.or_)

    def and_(self, other: SymNode) -> SymNode:
        return self.sym_and(other)

    def or_(self, other: SymNode) -> SymNode:
        return self.sym_or(other)

    def sym_not(self) -> SymNode:
        return self._boolean(sympy.Not(self.expr), not self._hint)

    def sym_ite(self, then_node: SymNode, else_node: SymNode) -> SymNode:
        # Piecewise is outside the serialized expression set: decide the condition instead.
        return then_node if self.guard_bool("", 0) else else_node

    # ---- layout predicates over sizes and strides (c10 calls these) -----------------------------

    def is_contiguous(self, sizes: Sequence[Any], strides: Sequence[Any]) -> SymNode:
        return self._layout(layout.is_contiguous, sizes, strides)

    def is_channels_last_contiguous_2d(
        self, sizes: Sequence[Any], strides: Sequence[Any]
    ) -> SymNode:
        return self._layout(layout.is_channels_last_contiguous_2d, sizes, strides)

    def is_channels_last_contiguous_3d(
        self, sizes: Sequence[Any], strides: Sequence[Any]
    ) -> SymNode:
        return self._layout(layout.is_channels_last_contiguous_3d, sizes, strides)

    def is_channels_last_strides_2d(self, sizes: Sequence[Any], strides: Sequence[Any]) -> SymNode:
        return self._layout(layout.is_channels_last_strides_2d, sizes, strides)

    def is_channels_last_strides_3d(self, sizes: Sequence[Any], strides: Sequence[Any]) -> SymNode:
        return self._layout(layout.is_channels_last_strides_3d, sizes, strides)

    def is_non_overlapping_and_dense(self, sizes: Sequence[Any], strides: Sequence[Any]) -> SymNode:
        """Dense in the order c10 would sort the dimensions into at the hints.

        The order (size < 2 last, then by stride) is guarded, so that under the guards the
        answer is exact for every size, not only at the hints.
        """
        size_nodes = [self._operand(size) for size in sizes]
        stride_nodes = [self._operand(stride) for stride in strides]
        order = sorted(
            range(len(size_nodes)),
            key=lambda d: (size_nodes[d].hint < 2, stride_nodes[d].hint),
        )
        env = self.shape_env
        large = [d for d in order if env.guard_bool(sympy.Ge(size_nodes[d].expr, 2))]
        for inner, outer in itertools.pairwise(large):
            env.guard_bool(sympy.Le(stride_nodes[inner].expr, stride_nodes[outer].expr))
        return self._layout(layout.dense_in_order, size_nodes, stride_nodes, order)

    # ---- guards -----------------------------------------------------------------------------

    def guard_bool(self, file: builtins.str, line: int) -> bool:
        return self.shape_env.guard_bool(self.expr, bool(self._hint))

    def guard_int(self, file: builtins.str, line: int) -> int:
        return int(self.shape_env.specialize(self.expr, self._hint))

    def guard_float(self, file: builtins.str, line: int) -> float:
        return float(self.shape_env.specialize(self.expr, self._hint))

    def expect_true(self, file: builtins.str, line: int) -> bool:
        return self.guard_bool(file, line)

    def guard_size_oblivious(self, file: builtins.str, line: int) -> bool:
        # Every ember symbol is backed by a hint, so size-oblivious reasoning adds nothing.
        return self.guard_bool(file, line)

    def guard_or_false(self, file: builtins.str, line: int) -> bool:
        return self.guard_bool(file, line)

    def guard_or_true(self, file: builtins.str, line: int) -> bool:
        return self.guard_bool(file, line)

    def statically_known_true(self, file: builtins.str, line: int) -> bool:
        return self.shape_env.is_statically_true(self.expr)

    def bool_(self) -> bool:
        return self.guard_bool("", 0)

    def int_(self) -> int:
        return self.guard_int("", 0)

    # ---- building new nodes ---------------------------------------------------------------------

    def _operand(self, other: Any) -> SymNode:
        """A node argument as one of ours (c10 may hand over plain ints or its own nodes)."""
        if isinstance(other, SymNode):
            return other
        if isinstance(other, bool):
            return self.wrap_bool(other)
        if isinstance(other, int):
            return self.wrap_int(other)
        if isinstance(other, float):
            return self.wrap_float(other)
        constant = other.maybe_as_int() if hasattr(other, "maybe_as_int") else None
        if constant is None:
            raise TypeError(f"ember's SymNode cannot combine with {type(other).__name__} {other}")
        return self.wrap_int(int(constant))

    def _make(self, expr: sympy.Basic, pytype: type, hint: Hint) -> SymNode:
        if pytype is bool:
            return self._boolean(expr, bool(hint))
        return SymNode(expr, self.shape_env, pytype, pytype(hint))

    def _boolean(self, expr: sympy.Basic, hint: bool) -> SymNode:
        # Conditions the ranges and guards settle become constants, so they never guard.
        answer = self.shape_env.static_value(expr)
        if answer is not None:
            expr = sympy.true if answer else sympy.false
        return SymNode(expr, self.shape_env, bool, hint)

    def _binary(
        self,
        other: Any,
        build: Callable[[Any, Any], sympy.Basic],
        compute: Callable[[Any, Any], Any],
        pytype: type,
    ) -> SymNode:
        right = self._operand(other)
        return self._make(build(self.expr, right.expr), pytype, compute(self._hint, right.hint))

    def _number(
        self,
        other: Any,
        build: Callable[[Any, Any], sympy.Basic],
        compute: Callable[[Any, Any], Any],
    ) -> SymNode:
        right = self._operand(other)
        pytype = float if float in (self.pytype, right.pytype) else int
        return self._make(build(self.expr, right.expr), pytype, compute(self._hint, right.hint))

    def _compare(
        self,
        other: Any,
        build: Callable[[Any, Any], sympy.Basic],
        compute: Callable[[Any, Any], bool],
    ) -> SymNode:
        return self._binary(other, build, compute, bool)

    def _logic(
        self,
        other: Any,
        build: Callable[[Any, Any], sympy.Basic],
        compute: Callable[[Any, Any], bool],
    ) -> SymNode:
        right = self._operand(other)
        hint = compute(bool(self._hint), bool(right.hint))
        return self._boolean(build(self.expr, right.expr), hint)

    def _unary(
        self, build: Callable[[Any], sympy.Basic], compute: Callable[[Any], Any], pytype: type
    ) -> SymNode:
        return self._make(build(self.expr), pytype, compute(self._hint))

    def _float_function(
        self, build: Callable[[Any], sympy.Basic], compute: Callable[[float], float]
    ) -> SymNode:
        return self._make(build(self.expr), float, compute(float(self._hint)))

    def _min_max(self, kind: type) -> Callable[[Any, Any], sympy.Basic]:
        def build(a: sympy.Basic, b: sympy.Basic) -> sympy.Basic:
            return self.shape_env.min_max(kind, (a, b))

        return build

    def _specialized(self, other: Any, compute: Callable[[int, int], int]) -> SymNode:
        # Bitwise operators have no expression in the serialized set: use concrete values.
        right = self._operand(other)
        return self.wrap_int(compute(self.guard_int("", 0), right.guard_int("", 0)))

    def _layout(
        self,
        predicate: Callable[..., sympy.Basic],
        sizes: Sequence[Any],
        strides: Sequence[Any],
        *extra: Any,
    ) -> SymNode:
        size_nodes = [self._operand(size) for size in sizes]
        stride_nodes = [self._operand(stride) for stride in strides]
        size_exprs = [node.expr for node in size_nodes]
        stride_exprs = [node.expr for node in stride_nodes]
        expr = self.shape_env.simplify(predicate(size_exprs, stride_exprs, *extra))
        return SymNode(expr, self.shape_env, bool, bool(self.shape_env.evaluate(expr)))


def _floordiv(a: sympy.Basic, b: sympy.Basic) -> sympy.Basic:
    return sympy.floor(a / b)


def _float_pow(a: Any, b: Any) -> float:
    return float(a) ** float(b)


def _check_divisor(other: Any, what: builtins.str) -> None:
    if isinstance(other, SymNode) and other.hint == 0:
        raise ZeroDivisionError(f"symbolic {what} by zero ({other.expr})")
