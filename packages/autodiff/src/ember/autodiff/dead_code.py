"""Dead-code elimination for pure Graphs: drop every node no output depends on.

Only for Graphs without writes (functionalized, joint, partitioned). Random ops stay even when
unused, so a compiled program draws from the generator as often as eager torch does.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.prims import Graph, Node, Ref, resolve_op


def eliminate_dead_code(graph: Graph) -> Graph:
    """Remove, in place, the nodes whose outputs nothing live reads; return `graph`."""
    live: set[str] = {leaf.name for leaf in graph.output_leaves if isinstance(leaf, Ref)}
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if _is_random(node.target) or any(v.name in live for v in node.output_values()):
            kept.append(node)
            live.update(ref.name for ref in references(node))
    graph.nodes = kept[::-1]
    used = live
    graph.inputs = [
        gi for gi in graph.inputs if not (gi.kind.value == "constant" and gi.value.name not in used)
    ]
    targets = {gi.target for gi in graph.inputs if gi.target is not None}
    graph.constants = {k: v for k, v in graph.constants.items() if k in targets}
    return graph


def references(node: Node) -> list[Ref]:
    """Every value a node reads."""
    found: list[Ref] = []
    for arg in (*node.args, *node.kwargs.values()):
        _collect(arg, found)
    return found


def _collect(arg: Any, found: list[Ref]) -> None:
    if isinstance(arg, Ref):
        found.append(arg)
    elif isinstance(arg, (list, tuple)):
        for item in arg:
            _collect(item, found)


def _is_random(target: str) -> bool:
    try:
        op = resolve_op(target)
    except (KeyError, ValueError):
        return False
    return torch.Tag.nondeterministic_seeded in getattr(op, "tags", ()) or (
        getattr(op, "family", None) == "random"
    )
