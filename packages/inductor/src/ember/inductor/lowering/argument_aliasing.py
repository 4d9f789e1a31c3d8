"""What an extern op's schema says about its tensor arguments' memory: which it writes, and
which output is a written argument returned again. The lowering orders writes after pending
reads of the written storage and binds such an output to the argument's storage.
"""

from __future__ import annotations

import torch


def mutated_positions(schema: torch.FunctionSchema | None) -> set[int | str]:
    """The arguments an op writes (by index and by name; a keyword-only one by name)."""
    if schema is None:
        return set()
    positions: set[int | str] = set()
    for i, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            positions.add(argument.name if argument.kwarg_only else i)
            positions.add(argument.name)
    return positions


def aliased_argument(schema: torch.FunctionSchema | None, position: int) -> int | str | None:
    """The argument that an op's output at `position` is, when the op writes into it and
    returns it (`add_`, `out=`), else None."""
    if schema is None or position >= len(schema.returns):
        return None
    alias = schema.returns[position].alias_info
    if alias is None or not alias.is_write:  # a view returned by a fallback is its own storage
        return None
    for i, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and argument.alias_info.before_set & alias.before_set:
            return argument.name if argument.kwarg_only else i
    return None
