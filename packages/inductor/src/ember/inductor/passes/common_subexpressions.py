"""Common subexpression elimination: merge nodes that compute the same thing from the same data.

Two nodes merge when they call the same op on the same arguments (after earlier merges),
produce the same output specs, and no write touched the storage of any argument between them.
Effectful nodes never merge (writes, random draws, asserts: see `effects`), nor do nodes whose
outputs are later written in place, nor two nodes whose results both reach the Graph's outputs
(merging would make two outputs that eager returns as separate tensors share memory).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Mapping
from typing import Any

import sympy

from ember.autodiff import AliasInfo, analyze_aliasing
from ember.inductor.passes.effects import is_effectful
from ember.inductor.passes.rebuild import rebuild, renamed_node
from ember.prims import Graph, Node, Ref

logger = logging.getLogger("ember.inductor")


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """A new Graph in which each repeated pure computation of `graph` happens once."""
    started = time.perf_counter()
    aliasing = analyze_aliasing(graph)
    written = aliasing.written_storages()
    returned = {
        aliasing.storage[leaf.name]
        for leaf in graph.output_leaves
        if isinstance(leaf, Ref) and leaf.name in aliasing.storage
    }
    versions: dict[str, int] = {}  # storage root -> number of writes so far
    seen: dict[Hashable, Node] = {}
    rename: dict[str, str] = {}
    nodes: list[Node] = []
    for index, original in enumerate(graph.nodes):
        node = renamed_node(original, rename)
        if _mergeable(index, original, aliasing, written):
            key = _key(node, aliasing.storage, versions)
            earlier = seen.get(key)
            if earlier is not None and not (
                _reaches(earlier, aliasing, returned) and _reaches(node, aliasing, returned)
            ):
                for mine, theirs in zip(node.output_values(), earlier.output_values()):
                    rename[mine.name] = theirs.name
                continue
            seen.setdefault(key, node)
        nodes.append(node)
        for write in aliasing.writes_of(index):
            versions[write.storage] = versions.get(write.storage, 0) + 1
    logger.debug("eliminate_common_subexpressions merged %d nodes", len(graph.nodes) - len(nodes))
    return rebuild(
        graph, nodes, pass_name="eliminate_common_subexpressions", started=started, rename=rename
    )


def _mergeable(index: int, node: Node, aliasing: AliasInfo, written: frozenset[str]) -> bool:
    if is_effectful(index, node, aliasing):
        return False
    # A node whose result is later written in place holds a buffer of its own, not a value.
    return all(aliasing.storage.get(value.name) not in written for value in node.output_values())


def _reaches(node: Node, aliasing: AliasInfo, returned: set[str]) -> bool:
    return any(aliasing.storage.get(value.name) in returned for value in node.output_values())


def _key(node: Node, storage: Mapping[str, str], versions: Mapping[str, int]) -> Hashable:
    specs = tuple(value.spec for value in node.output_values())
    args = tuple(_freeze(arg, storage, versions) for arg in node.args)
    kwargs = tuple(
        sorted((name, _freeze(arg, storage, versions)) for name, arg in node.kwargs.items())
    )
    return (node.target, args, kwargs, specs)


def _freeze(arg: Any, storage: Mapping[str, str], versions: Mapping[str, int]) -> Hashable:
    """A hashable stand-in for an argument that two calls share only if they mean the same."""
    if isinstance(arg, Ref):
        # The name and the state of its storage: a write in between makes it another input.
        return ("ref", arg.name, versions.get(storage.get(arg.name, arg.name), 0))
    if isinstance(arg, list):
        return ("list", tuple(_freeze(item, storage, versions) for item in arg))
    if isinstance(arg, float):
        return ("float", arg.hex())  # tells -0.0 from 0.0, and 1.0 from 1 and True
    if isinstance(arg, complex):
        return ("complex", arg.real.hex(), arg.imag.hex())
    if isinstance(arg, sympy.Basic):
        return ("sympy", sympy.srepr(arg))
    return (type(arg).__qualname__, arg)
