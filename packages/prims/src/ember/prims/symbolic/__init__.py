"""Symbolic sizes: `torch.SymInt`s backed by ember's own node class over sympy.

`ShapeEnv` creates size symbols and records the guards size decisions make; `SymNode` is the
node behind each SymInt/SymFloat/SymBool; `first_failing_guard` checks a Graph's guards
against concrete sizes. Expressions use builtin sympy classes only (see README of prims).
"""

from ember.prims.symbolic.evaluate import evaluate_expr, first_failing_guard
from ember.prims.symbolic.shape_env import ShapeEnv
from ember.prims.symbolic.sym_node import SymNode
from ember.prims.symbolic.value_ranges import ValueRange, bound, decide

__all__ = [
    "ShapeEnv",
    "SymNode",
    "ValueRange",
    "bound",
    "decide",
    "evaluate_expr",
    "first_failing_guard",
]
