"""Nodes computed from parameters alone (`t(weight)`, a cast of a weight), kept with the
node that consumes them when a Graph is cut at DDP's buckets.

Capture records `t(weight)` where the module reads the weight, which may be before other
work; a cut between it and its consumer would put the weight's gradient (the backward of
`t`) in the earlier piece, whose backward runs later, and delay that bucket's all-reduce.
`sink_parameter_nodes` moves each such node to just before its first consumer, so a cut
placed before the consumer's run of parameter nodes keeps them together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ember.prims import Graph, Node, Ref, resolve_op


def parameter_values(graph: Graph, parameters: set[str]) -> dict[str, set[str]]:
    """value name -> the parameters it is computed from, for every value a node computes
    from parameters alone (and no write)."""
    derived: dict[str, set[str]] = {}
    for node in graph.nodes:
        sources = _parameter_sources(node, parameters, derived)
        if sources is not None:
            for value in node.output_values():
                derived[value.name] = sources
    return derived


def _parameter_sources(
    node: Node, parameters: set[str], derived: dict[str, set[str]]
) -> set[str] | None:
    names = _ref_names((*node.args, *node.kwargs.values()))
    if not names or _writes(node):
        return None
    sources: set[str] = set()
    for name in names:
        if name in parameters:
            sources.add(name)
        elif name in derived:
            sources |= derived[name]
        else:
            return None
    return sources


def _writes(node: Node) -> bool:
    schema = getattr(resolve_op(node.target), "_schema", None)
    if schema is None:
        return True  # unknown: do not move it
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def sink_parameter_nodes(graph: Graph, parameters: set[str]) -> Graph:
    """`graph` with each parameter-only node moved to just before the first node that reads
    what it computes and is not itself parameter-only (order kept among them)."""
    derived = parameter_values(graph, parameters)
    moved = {
        index
        for index, node in enumerate(graph.nodes)
        if any(value.name in derived for value in node.output_values())
    }
    if not moved:
        return graph
    readers: dict[str, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for name in _ref_names((*node.args, *node.kwargs.values())):
            readers.setdefault(name, []).append(index)
    anchor: dict[int, int | None] = {}
    for index in sorted(moved, reverse=True):  # a node's readers come after it
        found: list[int] = []
        for value in graph.nodes[index].output_values():
            for reader in readers.get(value.name, []):
                target = anchor.get(reader) if reader in moved else reader
                if target is not None:
                    found.append(target)
        anchor[index] = min(found) if found else None
    order: list[Node] = []
    waiting: dict[int | None, list[int]] = {}
    for index in sorted(moved):
        waiting.setdefault(anchor[index], []).append(index)
    for index, node in enumerate(graph.nodes):
        if index in moved:
            continue
        order.extend(graph.nodes[i] for i in waiting.get(index, []))
        order.append(node)
    order.extend(graph.nodes[i] for i in waiting.get(None, []))
    return dataclasses.replace(graph, nodes=order)


def _ref_names(args: Iterable[Any]) -> list[str]:
    names: list[str] = []
    for arg in args:
        if isinstance(arg, Ref):
            names.append(arg.name)
        elif isinstance(arg, (list, tuple)):
            names.extend(_ref_names(arg))
        elif isinstance(arg, dict):
            names.extend(_ref_names(arg.values()))
    return names
