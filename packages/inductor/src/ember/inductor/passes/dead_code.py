"""Dead code elimination: drop nodes whose outputs nothing uses and that have no effects.

One backward sweep: a node is live if it is effectful (see `effects`) or if a live node or
the Graph's outputs read one of its values; the arguments of live nodes become used.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ember.autodiff import analyze_aliasing
from ember.inductor.passes.effects import is_effectful
from ember.inductor.passes.rebuild import rebuild, renamed_node
from ember.prims import Graph, Ref

logger = logging.getLogger("ember.inductor")


def eliminate_dead_code(graph: Graph) -> Graph:
    """A new Graph without the nodes of `graph` that cannot affect its outputs or state."""
    started = time.perf_counter()
    aliasing = analyze_aliasing(graph)
    used: set[str] = set()
    for leaf in graph.output_leaves:
        _collect_refs(leaf, used)
    live = [False] * len(graph.nodes)
    for index in reversed(range(len(graph.nodes))):
        node = graph.nodes[index]
        needed = any(value.name in used for value in node.output_values())
        if needed or is_effectful(index, node, aliasing):
            live[index] = True
            for arg in (*node.args, *node.kwargs.values()):
                _collect_refs(arg, used)
    nodes = [renamed_node(node, {}) for node, keep in zip(graph.nodes, live) if keep]
    removed = len(graph.nodes) - len(nodes)
    logger.debug("eliminate_dead_code removed %d of %d nodes", removed, len(graph.nodes))
    return rebuild(graph, nodes, pass_name="eliminate_dead_code", started=started)


def _collect_refs(arg: Any, used: set[str]) -> None:
    if isinstance(arg, Ref):
        used.add(arg.name)
    elif isinstance(arg, list):
        for item in arg:
            _collect_refs(item, used)
