"""Maximum flow and minimum cut on a directed graph with integer capacities (Dinic's algorithm).

`FlowNetwork` holds named vertices and edges; `min_cut(source, sink)` returns the set of
vertices on the source side of a minimum cut: those still reachable from the source in the
residual graph once the flow is maximal.
"""

from __future__ import annotations

from collections import deque


class FlowNetwork:
    """A directed graph with integer edge capacities, built by name."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self._names: list[str] = []
        # Edges in pairs: edge e and its residual twin e ^ 1.
        self._head: list[int] = []  # edge -> target vertex
        self._capacity: list[int] = []  # edge -> remaining capacity
        self._adjacent: list[list[int]] = []  # vertex -> outgoing edge ids

    def vertex(self, name: str) -> int:
        index = self._index.get(name)
        if index is None:
            index = self._index[name] = len(self._names)
            self._names.append(name)
            self._adjacent.append([])
        return index

    def add_edge(self, tail: str, head: str, capacity: int) -> None:
        """An edge `tail -> head` that carries at most `capacity` (>= 0)."""
        u, v = self.vertex(tail), self.vertex(head)
        self._adjacent[u].append(len(self._head))
        self._head.append(v)
        self._capacity.append(capacity)
        self._adjacent[v].append(len(self._head))
        self._head.append(u)
        self._capacity.append(0)

    def max_flow(self, source: str, sink: str) -> int:
        """Push the maximum flow from `source` to `sink`; return its value."""
        s, t = self.vertex(source), self.vertex(sink)
        total = 0
        while True:
            level = self._levels(s)
            if level[t] < 0:
                return total
            cursor = [0] * len(self._names)
            while True:
                pushed = self._augment(s, t, level, cursor)
                if pushed == 0:
                    break
                total += pushed

    def min_cut(self, source: str, sink: str) -> set[str]:
        """The source side of a minimum `source`-`sink` cut (after computing the max flow)."""
        self.max_flow(source, sink)
        level = self._levels(self.vertex(source))
        return {name for name, index in self._index.items() if level[index] >= 0}

    # ---- Dinic -------------------------------------------------------------------------

    def _levels(self, source: int) -> list[int]:
        level = [-1] * len(self._names)
        level[source] = 0
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for edge in self._adjacent[u]:
                v = self._head[edge]
                if self._capacity[edge] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level

    def _augment(self, source: int, sink: int, level: list[int], cursor: list[int]) -> int:
        """Find one augmenting path in the level graph (iteratively) and push along it."""
        path: list[int] = []  # edges from the source
        u = source
        while True:
            if u == sink:
                pushed = min(self._capacity[edge] for edge in path)
                for edge in path:
                    self._capacity[edge] -= pushed
                    self._capacity[edge ^ 1] += pushed
                return pushed
            edges = self._adjacent[u]
            advanced = False
            while cursor[u] < len(edges):
                edge = edges[cursor[u]]
                v = self._head[edge]
                if self._capacity[edge] > 0 and level[v] == level[u] + 1:
                    path.append(edge)
                    u = v
                    advanced = True
                    break
                cursor[u] += 1
            if advanced:
                continue
            # Dead end: u is useless in this phase; step back.
            level[u] = -1
            if not path:
                return 0
            edge = path.pop()
            u = self._head[edge ^ 1]
            cursor[u] += 1
