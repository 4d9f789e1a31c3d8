"""Which tangents each gradient of a backward Graph depends on.

A forward output nobody differentiates (a graph's pooler output that no later code reads,
say) reaches the backward as a missing tangent, which the runtime fills with zeros. A
gradient that depends on missing tangents alone is then a tensor of zeros, where eager
autograd, which never reaches the parameter, leaves `.grad` None: an optimizer tells the two
apart (AdamW decays a parameter with a zero gradient and skips one without). The runtime
uses this table to return None for such gradients, as eager does.
"""

from __future__ import annotations

from ember.autodiff.dead_code import references
from ember.prims import Graph, Ref


def tangents_reaching(backward: Graph) -> tuple[frozenset[int], ...]:
    """For each output of `backward` (`(saved..., tangents...) -> (gradient per primal...)`,
    its meta naming how many inputs are saved values): the tangents it depends on, by index
    among the tangents."""
    saved = int(backward.meta.get("saved_inputs", "0") or 0)
    reach: dict[str, frozenset[int]] = {
        graph_input.value.name: frozenset({position - saved})
        for position, graph_input in enumerate(backward.inputs)
        if position >= saved
    }
    for node in backward.nodes:
        found = [reach[ref.name] for ref in references(node) if ref.name in reach]
        if found:
            depends = frozenset().union(*found)
            for value in node.output_values():
                reach[value.name] = depends
    return tuple(
        reach.get(leaf.name, frozenset()) if isinstance(leaf, Ref) else frozenset()
        for leaf in backward.output_leaves
    )


def unreached(
    gradients: tuple[object, ...], reach: tuple[frozenset[int], ...], missing: frozenset[int]
) -> tuple[object, ...]:
    """`gradients` with None for each one that depends on tangents, all of them `missing`."""
    return tuple(
        None if depends and depends <= missing else gradient
        for gradient, depends in zip(gradients, reach, strict=False)
    )
