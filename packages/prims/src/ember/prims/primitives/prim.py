"""The Prim: one primitive operator of ember's closed set, and the table of all of them.

A prim is one small definition: a name (`prims::add`), a schema, a meta rule (meta tensors
in, meta tensors out: shape, dtype and strides) and a reference implementation in eager torch.
Called on real tensors it runs the reference; called on tracing tensors it records a node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ember.prims.ops import register_op

# Every prim by qualified name (`prims::add`), in definition order.
PRIMS: dict[str, Prim] = {}


class Prim:
    """One primitive operator; see docs/prims.md for every prim's semantics."""

    def __init__(
        self,
        name: str,
        schema: str,
        meta: Callable[..., Any],
        impl: Callable[..., Any],
        *,
        family: str,
        doc: str,
    ) -> None:
        self.name = name
        self.qualname = f"prims::{name}"
        self.signature = schema
        self._schema = torch._C.parse_schema(f"{self.qualname}{schema}")
        self.meta = meta
        self.impl = impl
        self.family = family
        self.doc = doc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ember.prims.primitives.recording import record_prim, tracing_owner

        owner = tracing_owner(args, kwargs)
        if owner is not None:
            return record_prim(owner, self, args, kwargs)
        return self.impl(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<prim {self.qualname}{self.signature}>"


def define(
    name: str,
    schema: str,
    meta: Callable[..., Any],
    impl: Callable[..., Any],
    *,
    family: str,
    doc: str,
) -> Prim:
    """Create a prim, add it to PRIMS and make `prims::<name>` resolve to it."""
    prim = Prim(name, schema, meta, impl, family=family, doc=doc)
    if prim.qualname in PRIMS:
        raise ValueError(f"prim {prim.qualname} is defined twice")
    PRIMS[prim.qualname] = prim
    register_op(prim.qualname, prim)
    return prim


def is_prim(target: str) -> bool:
    """Whether a node target names one of ember's prims."""
    return target in PRIMS


class PrimNamespace:
    """Attribute access to prims by short name: `prims.add(a, b)` calls `prims::add`."""

    def __getattr__(self, name: str) -> Prim:
        try:
            return PRIMS[f"prims::{name}"]
        except KeyError:
            raise AttributeError(f"there is no prim named {name!r}") from None


prims = PrimNamespace()
