"""`Node`: one recorded graph in the tree, its inputs plan, and how its outputs are handed out.

A node owns the tensors its capture allocated for outputs, for as long as it lives, so no
other recording in the pool can take that memory. Each replay hands out new tensors over the
same memory that do not own it; the tree poisons them when a later replay overwrites them.
Outputs that are views of an input are rebuilt on that call's input instead.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ember.runtime.cudagraphs.recording import Recorder, Recording
from ember.runtime.cudagraphs.static_inputs import InputPlan, Signature

if TYPE_CHECKING:
    from ember.runtime.cudagraphs.function import GraphFunction


class OutputKind(enum.Enum):
    VALUE = "value"  # not a tensor (or None): the same value every replay
    POOL = "pool"  # memory the capture allocated: a new tensor over it each replay
    INPUT_VIEW = "input_view"  # a view of an input: rebuilt on this call's input


@dataclass(frozen=True)
class OutputPlan:
    kind: OutputKind
    value: Any = None  # VALUE
    storage: int = 0  # POOL: index into the node's owned storages; INPUT_VIEW: input position
    dtype: torch.dtype | None = None
    size: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    offset: int = 0  # storage offset in elements (INPUT_VIEW: relative to the input's)
    requires_grad: bool = False


@dataclass
class Node:
    """A recording of `function` reached from `parent` (None: a root) with these inputs."""

    function: GraphFunction
    parent: Node | None
    signature: Signature
    inputs: InputPlan
    recording: Recording
    outputs: list[OutputPlan]
    owners: list[torch.Tensor]  # one tensor per output storage: keeps the memory allocated
    children: dict[int, list[Node]] = field(default_factory=dict)
    depth: int = 0

    @classmethod
    def create(
        cls,
        function: GraphFunction,
        parent: Node | None,
        signature: Signature,
        inputs: InputPlan,
        recording: Recording,
        recording_args: Sequence[Any],
    ) -> Node:
        owners: list[torch.Tensor] = []
        by_address: dict[int, int] = {}
        input_storages = {
            arg.untyped_storage().data_ptr(): position
            for position, arg in enumerate(recording_args)
            if isinstance(arg, torch.Tensor)
        }
        plans: list[OutputPlan] = []
        for output in recording.outputs:
            if not isinstance(output, torch.Tensor):
                plans.append(OutputPlan(OutputKind.VALUE, value=output))
                continue
            address = output.untyped_storage().data_ptr()
            meta = (output.dtype, tuple(output.shape), tuple(output.stride()))
            if address in input_storages:
                position = input_storages[address]
                base = recording_args[position]
                plans.append(
                    OutputPlan(OutputKind.INPUT_VIEW, None, position, *meta,
                               int(output.storage_offset() - base.storage_offset()),
                               output.requires_grad)
                )  # fmt: skip
                continue
            if address not in by_address:
                by_address[address] = len(owners)
                owners.append(output)
            plans.append(
                OutputPlan(OutputKind.POOL, None, by_address[address], *meta,
                           int(output.storage_offset()), output.requires_grad)
            )  # fmt: skip
        depth = 0 if parent is None else parent.depth + 1
        return cls(function, parent, signature, inputs, recording, plans, owners, depth=depth)

    def owned_addresses(self) -> set[int]:
        """Addresses of every output tensor this node hands out (children read them in place)."""
        return {
            output.data_ptr()
            for output, plan in zip(self.recording.outputs, self.outputs)
            if plan.kind is OutputKind.POOL
        }

    def hand_out(
        self, recorder: Recorder, args: Sequence[Any]
    ) -> tuple[list[Any], list[torch.Tensor]]:
        """This replay's outputs, and those of them over pool memory (to poison later)."""
        storages = [recorder.storage_alias(owner) for owner in self.owners]
        pooled: list[torch.Tensor] = []
        results: list[Any] = []
        for plan in self.outputs:
            if plan.kind is OutputKind.VALUE:
                results.append(plan.value)
                continue
            if plan.kind is OutputKind.INPUT_VIEW:
                base = args[plan.storage]
                tensor = base.as_strided(
                    plan.size, plan.stride, base.storage_offset() + plan.offset
                )
                results.append(tensor)
                continue
            tensor = torch.empty(0, dtype=plan.dtype, device=self.owners[plan.storage].device)
            tensor.set_(storages[plan.storage], plan.offset, plan.size, plan.stride)
            if plan.requires_grad:
                tensor.requires_grad_(True)
            pooled.append(tensor)
            results.append(tensor)
        return results, pooled
