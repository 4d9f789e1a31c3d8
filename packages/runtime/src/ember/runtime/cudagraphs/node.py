"""`Node`: one recorded graph in the tree, its inputs plan, and how its outputs are handed out.

A node owns the tensors its capture allocated for outputs, for as long as it lives, so no
other recording in the pool can take that memory. It hands out tensors over the same memory
that do not own it, built once and handed out again on every replay while nobody holds the
ones handed out before (as torch's trees return the same TensorImpl run to run): a replay's
hand-out is one reference-count comparison and a list copy. An output still held when a later
step begins is poisoned (`release_held`): a replay will overwrite it; its group (the outputs
over one storage) gets new tensors over a new storage alias. Outputs that are views of an
input are rebuilt on that call's input; outputs that require grad are built anew each call.

A backward's outputs (gradients) are built anew each call too: autograd installs a gradient in
`.grad` as it is only when nothing else refers to it, and copies it otherwise (a reduce-overhead
Llama-style step held its 594 MB of gradients twice, H200). That memory is overwritten when
the next step replays (by the backward, and by the graphs recorded before it, whose freed
memory it may have taken): when a step begins the tree moves the gradients still in a
parameter's `.grad` to memory of their own (accumulation over steps, zeroing in place), and
`poison_held` makes whatever else still holds a backward's output unreadable, as forward
outputs are.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ember.runtime.cudagraphs.function import FunctionMode
from ember.runtime.cudagraphs.reasons import OVERWRITTEN
from ember.runtime.cudagraphs.recording import Recorder, Recording
from ember.runtime.cudagraphs.static_inputs import InputPlan, Signature

if TYPE_CHECKING:
    from ember.runtime.cudagraphs.function import GraphFunction

_refcount = sys.getrefcount


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
    # storage addresses of its static inputs: the graphs after it read tensors over them in
    # place too (a backward's saved parameters)
    state_storages: frozenset[int] = frozenset()
    # storage address -> group of the owned storages whose outputs are all saved values (a
    # backward's recording may take them over: `donation`), and the backward that did
    donatable: dict[int, int] = field(default_factory=dict)
    donee: Node | None = field(default=None, repr=False)
    donors: list[Node] = field(default_factory=list, repr=False)
    # the hand-out, prepared on the first one: `_results` is the list every replay copies
    # (values, and the tensors over pool memory that are handed out again)
    _results: list[Any] | None = field(default=None, repr=False)
    _reused: list[torch.Tensor] = field(default_factory=list, repr=False)  # in `_results`
    _reused_at: list[int] = field(default_factory=list, repr=False)  # their output index
    _baseline: list[int] = field(default_factory=list, repr=False)  # their counts unheld
    _views: list[int] = field(default_factory=list, repr=False)  # INPUT_VIEW outputs
    _fresh: list[int] = field(default_factory=list, repr=False)  # POOL, built each call
    # a backward's: the storage aliases its outputs are built on (one per owned storage;
    # a tensor over one beyond the alias itself is an output someone holds)
    _aliases: list[torch.UntypedStorage] = field(default_factory=list, repr=False)

    @classmethod
    def create(
        cls,
        function: GraphFunction,
        parent: Node | None,
        signature: Signature,
        inputs: InputPlan,
        recording: Recording,
        arg_storages: Sequence[tuple[int, int] | None],
    ) -> Node:
        """`arg_storages`: per argument of the recording, its storage's address and its
        storage offset (None: not a tensor), taken before the capture emptied the list."""
        owners: list[torch.Tensor] = []
        by_address: dict[int, int] = {}
        input_storages = {
            facts[0]: position for position, facts in enumerate(arg_storages) if facts is not None
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
                base_offset = arg_storages[position][1]  # type: ignore[index]
                plans.append(
                    OutputPlan(OutputKind.INPUT_VIEW, None, position, *meta,
                               int(output.storage_offset() - base_offset),
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
        state = frozenset(
            facts[0]
            for position, facts in enumerate(arg_storages)
            if facts is not None and position in inputs.static_positions
        )
        return cls(function, parent, signature, inputs, recording, plans, owners, depth=depth,
                   state_storages=state)  # fmt: skip

    def give_up(self, group: int, recorder: Recorder) -> None:
        """Stop owning the memory of storage `group` (donated to a backward's recording, which
        frees it after its last read): the node keeps tensors over it that do not own it."""
        owner = self.owners[group]
        alias = recorder.storage_alias(owner)
        address = owner.untyped_storage().data_ptr()
        self.owners[group] = torch.empty(0, dtype=torch.uint8, device=owner.device).set_(alias)
        outputs = list(self.recording.outputs)
        for index, output in enumerate(outputs):
            if isinstance(output, torch.Tensor) and output.untyped_storage().data_ptr() == address:
                outputs[index] = _over(alias, output)
        self.recording.outputs = tuple(outputs)
        self.donatable.pop(address, None)

    def owned_addresses(self) -> set[int]:
        """Addresses of every output tensor this node hands out (children read them in place)."""
        return {
            output.data_ptr()
            for output, plan in zip(self.recording.outputs, self.outputs)
            if plan.kind is OutputKind.POOL
        }

    def hand_out(
        self, recorder: Recorder, args: Sequence[Any], step: int
    ) -> tuple[list[Any], list[torch.Tensor]]:
        """This replay's outputs, and those of them built for this call over pool memory
        (outputs that require grad: the tree poisons them later if they are still held)."""
        if self._results is None:
            self._prepare(recorder)
            self._baseline = list(map(_refcount, self._reused))  # no frame holds them now
        elif list(map(_refcount, self._reused)) != self._baseline:
            self.release_held(recorder, step)  # not expected: a step began without it
        if self.function.mode is FunctionMode.FORWARD:
            # autograd.Function gives its outputs a new grad_fn, but hooks a caller put on a
            # tensor it dropped stay on it (torch's trees clear them the same way)
            for tensor in self._reused:
                if tensor._backward_hooks is not None:
                    tensor._backward_hooks = None
        results = self._results.copy()  # type: ignore[union-attr]
        for index in self._views:
            plan = self.outputs[index]
            base = args[plan.storage]
            results[index] = base.as_strided(
                plan.size, plan.stride, base.storage_offset() + plan.offset
            )
        fresh: list[torch.Tensor] = []
        if self.function.mode is FunctionMode.BACKWARD:
            if len(self._aliases) != len(self.owners):
                self._aliases = [recorder.storage_alias(owner) for owner in self.owners]
            for index in self._fresh:
                results[index] = self._build(self.outputs[index], self._aliases)
        elif self._fresh:
            storages = [recorder.storage_alias(owner) for owner in self.owners]
            for index in self._fresh:
                tensor = self._build(self.outputs[index], storages)
                results[index] = tensor
                fresh.append(tensor)
        return results, fresh

    def poison_held(self, recorder: Recorder, message: str) -> int:
        """When a step begins: make this backward's outputs that are still held unreadable
        (a replay will overwrite them) and build the next ones on new aliases. Returns how
        many storages were poisoned."""
        poisoned = 0
        use_count = torch._C._storage_Use_Count
        for group, alias in enumerate(self._aliases):
            if use_count(alias._cdata) > 1:
                over = torch.empty(0, dtype=torch.uint8, device=self.owners[group].device)
                recorder.invalidate(over.set_(alias), message)
                self._aliases[group] = recorder.storage_alias(self.owners[group])
                poisoned += 1
        return poisoned

    def owned_storages(self) -> set[int]:
        """Addresses of the storages this node owns (its outputs' memory)."""
        return {owner.untyped_storage().data_ptr() for owner in self.owners}

    def release_held(self, recorder: Recorder, step: int) -> bool:
        """Poison the tensors handed out in `step` that someone still holds (a replay will
        overwrite them) and give their storage groups new tensors. True if any was held."""
        if self._results is None or list(map(_refcount, self._reused)) == self._baseline:
            return False
        self._rebuild_held(recorder, OVERWRITTEN.format(graph=self.function.name, step=step))
        self._baseline = list(map(_refcount, self._reused))  # no frame holds them now
        return True

    def _rebuild_held(self, recorder: Recorder, message: str) -> None:
        assert self._results is not None
        counts = list(map(_refcount, self._reused))
        held = [
            i for i, (count, unheld) in enumerate(zip(counts, self._baseline)) if count != unheld
        ]
        for i in held:
            recorder.invalidate(self._reused[i], message)
        groups = {self.outputs[self._reused_at[i]].storage for i in held}
        storages = {group: recorder.storage_alias(self.owners[group]) for group in groups}
        for i, index in enumerate(self._reused_at):
            plan = self.outputs[index]
            if plan.storage in groups:
                self._reused[i] = self._results[index] = self._build(plan, storages)

    def held_beyond(self, group: int, *lists: Sequence[Any]) -> bool:
        """Whether a tensor this node handed out over storage `group` is held by more than the
        `lists` (a saved-tensor hook's list, the caller): then its memory is not free to give."""
        if self._results is None:
            return False
        counts = list(map(_refcount, self._reused))
        for tensor, index, count, unheld in zip(
            self._reused, self._reused_at, counts, self._baseline
        ):
            if self.outputs[index].storage != group:
                continue
            listed = sum(1 for values in lists for value in values if value is tensor)
            if count - unheld > listed:
                return True
        return False

    def holds_nothing_handed_out(self) -> bool:
        """Whether no tensor this node handed out is held outside it."""
        return self._results is None or list(map(_refcount, self._reused)) == self._baseline

    def _prepare(self, recorder: Recorder) -> None:
        storages = [recorder.storage_alias(owner) for owner in self.owners]
        results: list[Any] = []
        for index, plan in enumerate(self.outputs):
            if plan.kind is OutputKind.VALUE:
                results.append(plan.value)
            elif plan.kind is OutputKind.INPUT_VIEW:
                results.append(None)
                self._views.append(index)
            elif plan.requires_grad or self.function.mode is FunctionMode.BACKWARD:
                results.append(None)
                self._fresh.append(index)
            else:
                tensor = self._build(plan, storages)
                results.append(tensor)
                self._reused.append(tensor)
                self._reused_at.append(index)
        self._results = results

    def _build(
        self, plan: OutputPlan, storages: Sequence[torch.UntypedStorage] | dict[int, Any]
    ) -> torch.Tensor:
        tensor = torch.empty(0, dtype=plan.dtype, device=self.owners[plan.storage].device)
        tensor.set_(storages[plan.storage], plan.offset, plan.size, plan.stride)
        if plan.requires_grad:
            tensor.requires_grad_(True)
        return tensor


def _over(storage: torch.UntypedStorage, like: torch.Tensor) -> torch.Tensor:
    """A tensor over `storage` with `like`'s dtype, sizes, strides and offset."""
    tensor = torch.empty(0, dtype=like.dtype, device=like.device)
    return tensor.set_(storage, like.storage_offset(), like.shape, like.stride())
