"""Size symbols across the cuts of a split Graph.

Backends bind a size symbol from an input dim that is exactly that symbol (`s0`, not
`2*s0`). A piece of a Graph with symbolic sizes must therefore receive, for every symbol it
uses, an input that carries it: in its forward (`size_carriers` adds a Graph input that
does), and in the backward its backend derives, whose inputs are the tangents of the
piece's outputs and what the forward saved (`cuts_with_bound_sizes` moves a cut to where
the piece's differentiable outputs carry its symbols, or drops it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy

from ember.prims import Graph, Node, Ref, TensorSpec, Value


def cuts_with_bound_sizes(graph: Graph, starts: Sequence[int]) -> list[int]:
    """`starts`, each moved to the nearest node index (within its bucket's range) where the
    piece it closes hands on outputs that carry every symbol the piece uses; a cut with no
    such index is dropped. The last piece ends with the Graph's own outputs."""
    if not graph.symbols or not starts:
        return list(starts)
    values = graph.values()
    count = len(graph.nodes)
    last_read: dict[str, int] = {}
    for index, node in enumerate(graph.nodes):
        for arg in (*node.args, *node.kwargs.values()):
            for name in _ref_names(arg):
                last_read[name] = index
    for leaf in graph.output_leaves:
        if isinstance(leaf, Ref):
            last_read[leaf.name] = count
    kept: list[int] = []
    previous = 0
    bounds = [*sorted(starts), count]
    for position, start in enumerate(bounds[:-1]):
        following = bounds[position + 1]
        candidates = [*range(start, following), *range(start - 1, previous, -1)]
        chosen = next(
            (t for t in candidates if _carries(graph, previous, t, last_read, values)), None
        )
        if chosen is not None:
            kept.append(chosen)
            previous = chosen
    return kept


def _carries(
    graph: Graph, begin: int, end: int, last_read: dict[str, int], values: dict[str, Value]
) -> bool:
    """Whether the differentiable outputs of nodes[begin:end] carry the symbols it uses."""
    segment = graph.nodes[begin:end]
    outputs = [
        value.name
        for node in segment
        for value in node.output_values()
        if last_read.get(value.name, -1) >= end
        and isinstance(value.spec, TensorSpec)
        and value.spec.requires_grad
    ]
    needed: set[str] = set()
    for node in segment:
        for value in node.output_values():
            if isinstance(value.spec, TensorSpec):
                needed |= value.spec.free_symbols()
        for arg in (*node.args, *node.kwargs.values()):
            needed |= _arg_symbols(arg)
    return needed <= bound_by(outputs, values)


def _ref_names(arg: Any) -> list[str]:
    if isinstance(arg, Ref):
        return [arg.name]
    if isinstance(arg, (list, tuple)):
        return [name for item in arg for name in _ref_names(item)]
    if isinstance(arg, dict):
        return _ref_names(list(arg.values()))
    return []


def size_carriers(
    graph: Graph,
    segment: list[Node],
    inputs: list[str],
    outputs: list[str],
    values: dict[str, Value],
) -> list[str]:
    """Graph inputs a piece takes only for their sizes: backends bind a size symbol from an
    input dim that is exactly that symbol, and a piece may use `s0` while its own inputs
    only have `2*s0`. The Graph's user inputs bind every symbol, so one of them carries it.
    Raises ValueError when none does."""
    names = [*inputs, *outputs, *(v.name for node in segment for v in node.output_values())]
    needed: set[str] = set()
    for name in names:
        spec = values[name].spec
        if isinstance(spec, TensorSpec):
            needed |= spec.free_symbols()
    for node in segment:
        for arg in (*node.args, *node.kwargs.values()):
            needed |= _arg_symbols(arg)
    missing = needed - bound_by(inputs, values)
    carriers: list[str] = []
    for leaf in graph.input_leaves:
        if not missing:
            break
        if isinstance(leaf, Ref) and leaf.name not in inputs:
            bound = bound_by([leaf.name], values) & missing
            if bound:
                carriers.append(leaf.name)
                missing -= bound
    if missing:
        raise ValueError(f"no input of {graph.name} carries the sizes {sorted(missing)}")
    return carriers


def bound_by(names: Sequence[str], values: dict[str, Value]) -> set[str]:
    bound: set[str] = set()
    for name in names:
        spec = values[name].spec
        if isinstance(spec, TensorSpec):
            bound |= {str(size) for size in spec.shape if isinstance(size, sympy.Symbol)}
    return bound


def _arg_symbols(arg: Any) -> set[str]:
    if isinstance(arg, sympy.Basic):
        return {str(symbol) for symbol in arg.free_symbols}
    if isinstance(arg, (list, tuple)):
        return set().union(*(_arg_symbols(item) for item in arg)) if arg else set()
    if isinstance(arg, dict):
        return _arg_symbols(list(arg.values()))
    return set()
