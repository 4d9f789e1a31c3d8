"""Qualified operator names (`aten::addmm.default`) and their resolution to callables.

Names are what layers share; `resolve_op` turns one into the callable that runs it: a
`torch.ops` overload, or an operator registered with `register_op` (ember's own prims, a
vendor's ops). Resolution only looks names up; it never imports anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

_QUALNAME = re.compile(
    r"^([A-Za-z][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?$"
)


@dataclass(frozen=True)
class OpName:
    """A parsed qualified operator name."""

    namespace: str
    name: str
    overload: str = "default"

    def __str__(self) -> str:
        return f"{self.namespace}::{self.name}.{self.overload}"


def parse_op_name(qualname: str) -> OpName:
    """Split `ns::name.overload`; raise ValueError on anything else."""
    match = _QUALNAME.match(qualname)
    if match is None or match.group(2).startswith("__"):
        raise ValueError(f"{qualname!r} is not a qualified operator name like 'aten::add.Tensor'")
    namespace, name, overload = match.groups()
    return OpName(namespace, name, overload or "default")


def op_name(op: Any) -> str:
    """The qualified name of a `torch.ops` overload or a registered operator."""
    if isinstance(op, torch._ops.OpOverload):
        overload = op._overloadname or "default"
        return f"{op._schema.name}.{overload}"
    qualname = getattr(op, "qualname", None)
    if isinstance(qualname, str):
        return qualname
    raise TypeError(f"{op!r} is not an operator ember can name")


# Operators that are not torch.ops overloads (ember prims, vendors' ops): name -> callable.
_REGISTERED: dict[str, Callable[..., Any]] = {}


def register_op(qualname: str, fn: Callable[..., Any]) -> None:
    """Make `qualname` resolve to `fn` (for operators that torch.ops does not hold)."""
    parse_op_name(qualname)
    _REGISTERED[qualname] = fn
    resolve_op.cache_clear()


@cache
def resolve_op(qualname: str) -> Callable[..., Any]:
    """The callable for `qualname`; raise KeyError naming the operator if there is none."""
    registered = _REGISTERED.get(qualname)
    if registered is not None:
        return registered
    parsed = parse_op_name(qualname)
    try:
        packet = getattr(getattr(torch.ops, parsed.namespace), parsed.name)
        overload = getattr(packet, parsed.overload)
    except (AttributeError, RuntimeError) as error:
        raise KeyError(f"unknown operator {qualname}") from error
    if not isinstance(overload, torch._ops.OpOverload):
        raise KeyError(f"unknown operator {qualname}")
    return overload


def op_schema(qualname: str) -> torch.FunctionSchema | None:
    """The schema of a torch.ops operator, or None for registered non-torch operators."""
    op = resolve_op(qualname)
    schema = getattr(op, "_schema", None)
    return schema if isinstance(schema, torch.FunctionSchema) else None


def is_known_op(qualname: str) -> bool:
    try:
        resolve_op(qualname)
    except (KeyError, ValueError):
        return False
    return True


def mutated_arguments(qualname: str) -> tuple[str, ...]:
    """Names of the arguments the operator writes to (`Tensor(a!)` in its schema)."""
    schema = op_schema(qualname)
    if schema is None:
        return ()
    return tuple(
        argument.name
        for argument in schema.arguments
        if argument.alias_info is not None and argument.alias_info.is_write
    )
