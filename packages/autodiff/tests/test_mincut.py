"""The max-flow/min-cut solver against brute force on small random networks."""

from __future__ import annotations

import itertools
import random

import pytest

from ember.autodiff.mincut import FlowNetwork


def _brute_force_cut(vertices: int, edges: list[tuple[int, int, int]]) -> int:
    """The minimum capacity over every source/sink bipartition (vertex 0 source, 1 sink)."""
    best = None
    others = list(range(2, vertices))
    for mask in itertools.product([False, True], repeat=len(others)):
        source_side = {0} | {v for v, inside in zip(others, mask) if inside}
        cut = sum(c for u, v, c in edges if u in source_side and v not in source_side)
        best = cut if best is None else min(best, cut)
    assert best is not None
    return best


@pytest.mark.parametrize("seed", range(25))
def test_max_flow_equals_brute_force_min_cut(seed: int) -> None:
    rng = random.Random(seed)
    vertices = rng.randint(3, 8)
    edges = [
        (u, v, rng.randint(0, 9))
        for u in range(vertices)
        for v in range(vertices)
        if u != v and rng.random() < 0.4
    ]
    network = FlowNetwork()
    for u, v, capacity in edges:
        network.add_edge(str(u), str(v), capacity)
    network.vertex("0")
    network.vertex("1")
    expected = _brute_force_cut(vertices, edges)
    source_side = network.min_cut("0", "1")
    assert "0" in source_side and "1" not in source_side
    cut = sum(c for u, v, c in edges if str(u) in source_side and str(v) not in source_side)
    assert cut == expected


def test_cut_separates_at_the_cheapest_edge() -> None:
    network = FlowNetwork()
    network.add_edge("source", "a", 100)
    network.add_edge("a", "b", 3)
    network.add_edge("b", "sink", 100)
    network.add_edge("source", "b", 2)
    assert network.max_flow("source", "sink") == 5
