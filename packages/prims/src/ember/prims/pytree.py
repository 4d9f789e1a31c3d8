"""Pytree signatures: how a function's nested inputs and outputs map to flat leaves.

A `TreeSpec` is plain data (tuple, list, dict and leaf nodes), so a Graph's input and output
structure serializes with it. Only builtin containers are structural; everything else is a leaf.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

CONTAINER_KINDS = ("tuple", "list", "dict")


@dataclass(frozen=True)
class TreeSpec:
    """The shape of a nested value: `kind` is "leaf", "tuple", "list" or "dict"."""

    kind: str
    children: tuple[TreeSpec, ...] = ()
    keys: tuple[str | int, ...] = ()  # dict keys, in insertion order

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(child.num_leaves for child in self.children)

    def __str__(self) -> str:
        if self.kind == "leaf":
            return "*"
        inner = ", ".join(
            f"{key!r}: {child}" if self.kind == "dict" else str(child)
            for key, child in zip(self.keys or [None] * len(self.children), self.children)
        )
        if self.kind == "tuple":
            return f"({inner}{',' if len(self.children) == 1 else ''})"
        if self.kind == "list":
            return f"[{inner}]"
        return "{" + inner + "}"


LEAF = TreeSpec("leaf")


def tree_flatten(tree: Any) -> tuple[list[Any], TreeSpec]:
    """Flat leaves of `tree` in order, and its spec."""
    leaves: list[Any] = []
    spec = _flatten_into(tree, leaves)
    return leaves, spec


def _flatten_into(tree: Any, leaves: list[Any]) -> TreeSpec:
    # Exact types only: a NamedTuple or a dict subclass is a leaf, not a container.
    if type(tree) is tuple:
        return TreeSpec("tuple", tuple(_flatten_into(item, leaves) for item in tree))
    if type(tree) is list:
        return TreeSpec("list", tuple(_flatten_into(item, leaves) for item in tree))
    if type(tree) is dict and all(isinstance(key, (str, int)) for key in tree):
        keys = tuple(tree.keys())
        return TreeSpec("dict", tuple(_flatten_into(tree[key], leaves) for key in keys), keys)
    leaves.append(tree)
    return LEAF


def tree_unflatten(leaves: Sequence[Any], spec: TreeSpec) -> Any:
    """Rebuild the nested value of `spec` from flat `leaves`."""
    iterator = iter(leaves)
    result = _unflatten_from(iterator, spec)
    if next(iterator, _END) is not _END:
        raise ValueError(f"too many leaves for tree spec {spec}")
    return result


_END = object()


def _unflatten_from(leaves: Any, spec: TreeSpec) -> Any:
    if spec.kind == "leaf":
        leaf = next(leaves, _END)
        if leaf is _END:
            raise ValueError("too few leaves for tree spec")
        return leaf
    children = [_unflatten_from(leaves, child) for child in spec.children]
    if spec.kind == "tuple":
        return tuple(children)
    if spec.kind == "list":
        return children
    return dict(zip(spec.keys, children))


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """`tree` with `fn` applied to every leaf."""
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([fn(leaf) for leaf in leaves], spec)
