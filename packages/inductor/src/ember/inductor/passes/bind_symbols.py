"""Size symbols the wrapper can read from an input's size.

The wrapper binds a size symbol from an input dim whose size is that bare symbol. A backward
Graph often has none: its inputs are gradients and saved values of sizes like `s1 - 1` (the
gradient of `torch.diff`) while `s1` was a forward input's size. `bind_symbols` redefines
such a symbol as the size it can read: with `s1 - 1` in an input dim, `s1` henceforth means
the old `s1 - 1`, and every size, argument and guard of the Graph is rewritten with
`s1 + 1` for the old symbol (its hint and range move with it). Names stay, so the Graph's
shape environment is rebuilt as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sympy

from ember.prims import Graph, GraphInput, Node, TensorSpec, Value
from ember.prims.graph import ShapeGuard
from ember.prims.specs import ScalarSpec, symbol


def bind_symbols(graph: Graph) -> Graph:
    """`graph` with every size symbol that no input dim holds bare, but one holds as
    `symbol + constant`, redefined as that dim's size; `graph` itself when none needs it."""
    shapes = [
        tuple(sympy.sympify(s) for s in graph_input.value.spec.shape)
        for graph_input in graph.inputs
        if isinstance(graph_input.value.spec, TensorSpec)
    ]
    bare = {str(size) for shape in shapes for size in shape if isinstance(size, sympy.Symbol)}
    shifts: dict[str, int] = {}
    found: dict[str, sympy.Symbol] = {}
    for shape in shapes:
        for size in shape:
            free = size.free_symbols
            if len(free) != 1:
                continue
            (sym,) = free
            name = str(sym)
            if name in bare or name in shifts or name not in graph.symbols:
                continue
            constant = sympy.expand(size - sym)
            if constant.is_Integer:
                shifts[name] = int(constant)
                found[name] = sym
    if not shifts:
        return graph
    old = {found[name]: found[name] - shift for name, shift in shifts.items()}
    old.update({symbol(name): symbol(name) - shift for name, shift in shifts.items()})
    symbols = dict(graph.symbols)
    for name, shift in shifts.items():
        info = symbols[name]
        symbols[name] = dataclasses.replace(
            info,
            lower=info.lower + shift,
            upper=None if info.upper is None else info.upper + shift,
            hint=None if info.hint is None else info.hint + shift,
        )
    return dataclasses.replace(
        graph,
        inputs=[_input(graph_input, old) for graph_input in graph.inputs],
        nodes=[_node(node, old) for node in graph.nodes],
        input_leaves=[_arg(leaf, old) for leaf in graph.input_leaves],
        output_leaves=[_arg(leaf, old) for leaf in graph.output_leaves],
        symbols=symbols,
        guards=[ShapeGuard(_expr(g.expr, old), g.source) for g in graph.guards],
        meta=dict(graph.meta),
    )


def _expr(expr: Any, old: dict[sympy.Symbol, sympy.Expr]) -> Any:
    if not isinstance(expr, sympy.Basic):
        return expr
    replaced = expr.xreplace(old)
    return sympy.expand(replaced) if isinstance(replaced, sympy.Expr) else replaced


def _arg(arg: Any, old: dict[sympy.Symbol, sympy.Expr]) -> Any:
    if isinstance(arg, list):
        return [_arg(item, old) for item in arg]
    if isinstance(arg, tuple):
        return tuple(_arg(item, old) for item in arg)
    return _expr(arg, old)


def _spec(spec: Any, old: dict[sympy.Symbol, sympy.Expr]) -> Any:
    if isinstance(spec, TensorSpec):
        return dataclasses.replace(
            spec,
            shape=tuple(_expr(s, old) for s in spec.shape),
            strides=tuple(_expr(s, old) for s in spec.strides),
            storage_offset=_expr(spec.storage_offset, old),
        )
    if isinstance(spec, ScalarSpec) and spec.expr is not None:
        return dataclasses.replace(spec, expr=_expr(spec.expr, old))
    return spec


def _value(value: Value, old: dict[sympy.Symbol, sympy.Expr]) -> Value:
    return Value(value.name, _spec(value.spec, old))


def _input(graph_input: GraphInput, old: dict[sympy.Symbol, sympy.Expr]) -> GraphInput:
    return dataclasses.replace(graph_input, value=_value(graph_input.value, old))


def _node(node: Node, old: dict[sympy.Symbol, sympy.Expr]) -> Node:
    outputs: list[Any] = []
    for output in node.outputs:
        if isinstance(output, Value):
            outputs.append(_value(output, old))
        elif isinstance(output, list):
            outputs.append([_value(v, old) if isinstance(v, Value) else v for v in output])
        else:
            outputs.append(output)
    return Node(
        node.target,
        [_arg(a, old) for a in node.args],
        {key: _arg(a, old) for key, a in node.kwargs.items()},
        outputs,
        node.source,
    )
