"""Building a pass's output Graph: the input's fields, new nodes, renamed references.

Passes never edit the Graph they are given; they hand their new node list here and get a
Graph that shares no mutable container with the input, stamped with the pass and its time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from ember.prims import Graph, Node, Ref


def rename_refs(arg: Any, rename: Mapping[str, str]) -> Any:
    """`arg` with every reference to a renamed value pointing at its new name."""
    if isinstance(arg, Ref):
        return Ref(rename[arg.name]) if arg.name in rename else arg
    if isinstance(arg, list):
        return [rename_refs(item, rename) for item in arg]
    return arg


def renamed_node(node: Node, rename: Mapping[str, str]) -> Node:
    """A copy of `node` whose arguments follow `rename`."""
    return dataclasses.replace(
        node,
        args=[rename_refs(arg, rename) for arg in node.args],
        kwargs={key: rename_refs(arg, rename) for key, arg in node.kwargs.items()},
        outputs=list(node.outputs),
    )


def rebuild(
    graph: Graph,
    nodes: list[Node],
    *,
    pass_name: str,
    started: float,
    rename: Mapping[str, str] | None = None,
) -> Graph:
    """A new Graph like `graph` with `nodes`; `started` is the pass's `time.perf_counter()`."""
    rename = rename or {}
    return dataclasses.replace(
        graph,
        inputs=list(graph.inputs),
        nodes=nodes,
        input_leaves=list(graph.input_leaves),
        output_leaves=[rename_refs(leaf, rename) for leaf in graph.output_leaves],
        symbols=dict(graph.symbols),
        guards=list(graph.guards),
        constants=dict(graph.constants),
        subgraphs=dict(graph.subgraphs),
        meta={
            **graph.meta,
            "pass": pass_name,
            "time_ms": f"{(time.perf_counter() - started) * 1e3:.1f}",
        },
    )
