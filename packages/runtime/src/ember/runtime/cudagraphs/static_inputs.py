"""Replay inputs: how each argument of a recorded graph reaches it again on replay.

A CUDA graph reads fixed addresses. Parameters and buffers (static inputs, and tensors over
the memory of the static inputs of the graphs before it) and outputs of the graphs before it
in the tree are read where they are, and a replay checks that they are
still there; every other tensor is copied into a placeholder the graph was recorded with,
except those the graph never reads (they may be CPU tensors: they are left alone); Python
values must be equal. `InputPlan` holds that decision per argument.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import torch

Signature = tuple[Any, ...]
_data_ptr = torch.Tensor.data_ptr


@dataclass
class InputPlan:
    """Per argument of one recording: read in place (address checked), copied, or a value."""

    fixed_positions: list[int]  # static inputs and tree outputs: read where they are
    fixed_addresses: list[int]
    static_positions: frozenset[int]  # the fixed positions that are parameters or buffers
    copied_positions: list[int]  # copied into `placeholders` before each replay
    placeholders: list[torch.Tensor]

    def __post_init__(self) -> None:
        self._take: Callable[[Sequence[Any]], Any] | None = (
            operator.itemgetter(*self.fixed_positions) if self.fixed_positions else None
        )

    @classmethod
    def build(
        cls,
        args: Sequence[Any],
        static: Collection[int],
        tree_addresses: Collection[int],
        unread: Collection[int] = (),
        state_storages: Collection[int] = (),
    ) -> InputPlan:
        """Decide per argument; placeholders are allocated (outside any capture) and filled.
        Arguments at `unread` positions are left as they are: the graph never reads them.
        A tensor over the memory of a static input of a graph before it in the tree
        (`state_storages`: storage addresses) counts as static: a backward's saved
        parameters (views of them, not the parameters) are read in place."""
        static = set(static)
        fixed: list[int] = []
        copied: list[int] = []
        placeholders: list[torch.Tensor] = []
        for position, arg in enumerate(args):
            if not isinstance(arg, torch.Tensor) or position in unread:
                continue
            if state_storages and arg.untyped_storage().data_ptr() in state_storages:
                static.add(position)
            if position in static or arg.data_ptr() in tree_addresses:
                fixed.append(position)
            else:
                copied.append(position)
                placeholder = torch.empty_strided(
                    arg.shape, arg.stride(), dtype=arg.dtype, device=arg.device
                )
                placeholder.copy_(arg)
                placeholders.append(placeholder)
        return cls(
            fixed,
            [args[p].data_ptr() for p in fixed],
            frozenset(p for p in fixed if p in static),
            copied,
            placeholders,
        )

    def recording_args(self, args: Sequence[Any]) -> list[Any]:
        """The arguments a capture runs with: placeholders in place of copied tensors."""
        result = list(args)
        for position, placeholder in zip(self.copied_positions, self.placeholders):
            result[position] = placeholder
        return result

    def moved(self, args: Sequence[Any]) -> int | None:
        """The first fixed position whose tensor is not at its recorded address, or None."""
        take = self._take
        if take is None:
            return None
        fixed = take(args)
        if len(self.fixed_positions) == 1:
            fixed = (fixed,)
        if list(map(_data_ptr, fixed)) == self.fixed_addresses:  # the hot path: no frame each
            return None
        for position, address in zip(self.fixed_positions, self.fixed_addresses):
            if args[position].data_ptr() != address:
                return position
        return None  # pragma: no cover - the comparison above found a difference

    def copy_in(self, args: Sequence[Any]) -> None:
        """Copy this call's non-static tensors into the placeholders the graph reads."""
        for position, placeholder in zip(self.copied_positions, self.placeholders):
            placeholder.copy_(args[position])
