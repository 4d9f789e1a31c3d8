"""One cast per value and dtype in the joint Graph, before the partitioner chooses what to save.

Under autocast every Linear casts its own input: Llama's q, k and v projections each cast the
same normalized block input to bf16, three nodes computing one value. The cut prices and
saves values by name, so the three would be saved (or recomputed) three times over; merged,
the bf16 copy is one value. Only casts of the same value with the same arguments and output
spec merge, and never two that are both outputs of the Graph (the caller gets two tensors).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ember.autodiff.joint import JointGraph
from ember.prims import Node, Ref, tree_flatten

# Autocast's casts. Not the prims casts decompositions make: a batch norm's decomposition
# casts its input once for the statistics and once for the normalization; merged, the one
# cast is read by the statistics' reduction too, and the cut (ResNet tiny, bf16) saved every
# ReLU output beside the convolution outputs (624 -> 983 KB).
CASTS = frozenset({"aten::_to_copy.default"})


def merge_duplicate_casts(joint: JointGraph) -> JointGraph:
    """`joint` with each repeated cast replaced by its first occurrence (`joint` itself when
    there is none)."""
    graph = joint.graph
    outputs = {leaf.name for leaf in tree_flatten(graph.output_leaves)[0] if isinstance(leaf, Ref)}
    first: dict[tuple[Any, ...], str] = {}
    renamed: dict[str, str] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        node = _with_renamed_args(node, renamed) if renamed else node
        values = list(node.output_values())
        if node.target in CASTS and len(values) == 1:
            key = (
                node.target,
                repr(node.args),
                repr(sorted(node.kwargs.items())),
                repr(values[0].spec),
            )
            earlier = first.get(key)
            if earlier is not None and not (earlier in outputs and values[0].name in outputs):
                renamed[values[0].name] = earlier
                continue
            first.setdefault(key, values[0].name)
        nodes.append(node)
    if not renamed:
        return joint
    leaves = [_renamed(leaf, renamed) for leaf in graph.output_leaves]
    merged = dataclasses.replace(graph, nodes=nodes, output_leaves=leaves)
    return dataclasses.replace(joint, graph=merged)


def _with_renamed_args(node: Node, renamed: dict[str, str]) -> Node:
    args = [_renamed(arg, renamed) for arg in node.args]
    kwargs = {key: _renamed(arg, renamed) for key, arg in node.kwargs.items()}
    return Node(node.target, args, kwargs, node.outputs, node.source)


def _renamed(arg: Any, renamed: dict[str, str]) -> Any:
    if isinstance(arg, Ref):
        return Ref(renamed.get(arg.name, arg.name))
    if isinstance(arg, list):
        return [_renamed(item, renamed) for item in arg]
    if isinstance(arg, tuple):
        return tuple(_renamed(item, renamed) for item in arg)
    if isinstance(arg, dict):
        return {key: _renamed(item, renamed) for key, item in arg.items()}
    return arg
