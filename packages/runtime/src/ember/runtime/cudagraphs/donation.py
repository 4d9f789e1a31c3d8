"""Saved values donated to the backward's recording: memory an eager backward frees.

A training forward's saved values are read by its backward alone, and autograd drops them
when that backward runs (unless `retain_graph=True`): an eager backward, and torch's trees,
free each one after its last read, so the backward's own buffers take that memory. A node
owns its outputs' memory for as long as it lives, which for saved values would keep the
forward's activations and the backward's buffers apart, both at once (the reduce-overhead
training peak 1.5-2x torch.compile's on GPT-2 and a Llama-style model, H100).

So when a backward is recorded with its saved values dropped by its caller (`consumed`),
each storage of a node on the path whose outputs are all saved values, and which the
backward takes as a saved argument, is donated: the node gives up its owning tensor, the
recording's argument list gets tensors over that memory that own it, and the wrapper drops
them after their last read, so the capture frees the memory into the pool and later buffers
of the same capture reuse it. Every replay uses the same addresses in the same order.

Two rules keep that correct (the tree applies them):
- between a donor and its backward, the donated memory holds values the backward has yet to
  read while the pool counts it free: no recording is made there (`SAVED_VALUES_LIVE`; the
  graph runs as it is, its memory from the caching allocator, not the pool);
- a backward whose caller keeps its saved values (`retain_graph=True`: another backward will
  read them) must not replay a recording that reused them (`RETAINED_SAVED`): it runs as it
  is, and a backward recorded in such a call donates nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ember.runtime.cudagraphs.node import Node, OutputKind

if TYPE_CHECKING:
    from ember.runtime.cudagraphs.function import GraphFunction
    from ember.runtime.cudagraphs.recording import Recorder


def donatable_groups(node: Node) -> dict[int, int]:
    """Storage address -> group, for the storages `node` owns whose outputs are all among its
    function's last `saved_outputs` (a training forward's saved values, which none of its
    callers receives)."""
    saved_outputs = node.function.saved_outputs
    if saved_outputs <= 0:
        return {}
    first_saved = len(node.outputs) - saved_outputs
    saved_only = set(range(len(node.owners)))
    for index, plan in enumerate(node.outputs):
        if plan.kind is OutputKind.POOL and index < first_saved:
            saved_only.discard(plan.storage)
    owners = node.owners
    return {owners[group].untyped_storage().data_ptr(): group for group in sorted(saved_only)}


def donate(
    path: Sequence[Node],
    function: GraphFunction,
    recording_args: list[Any],
    recorder: Recorder,
    args: Sequence[Any] = (),
) -> tuple[list[Node], set[int]]:
    """Give the memory of the saved values `function` (a backward) reads to its recording:
    the owning tensors replace the arguments in `recording_args`, and the nodes on `path`
    that held them stop owning it. A storage whose handed-out tensors someone holds beyond
    `recording_args` and the call's `args` (a saved-tensor hook kept one) is not given.
    Returns those nodes (the donors) and the positions
    donated: the capture frees their memory, so an output found there later is the
    recording's own, not a view of the argument."""
    candidates: dict[int, tuple[Node, int]] = {}
    for node in path:
        for address, group in node.donatable.items():
            candidates[address] = (node, group)
    if not candidates:
        return [], set()
    matches: list[tuple[int, Node, int]] = []  # (position, donor, group)
    for position in sorted(function.saved_positions):
        if position < len(recording_args) and isinstance(recording_args[position], torch.Tensor):
            found = candidates.get(recording_args[position].untyped_storage().data_ptr())
            if found is not None:
                matches.append((position, *found))
    # decided before any argument is replaced, with no reference held here beyond the lists
    given = {
        (id(node), group): not node.held_beyond(group, recording_args, args)
        for _, node, group in matches
    }
    taken: dict[tuple[int, int], tuple[Node, int]] = {}
    positions: set[int] = set()
    for position, node, group in matches:
        if not given[(id(node), group)]:
            continue
        arg = recording_args[position]
        owner = node.owners[group]
        view = owner.as_strided(arg.shape, arg.stride(), arg.storage_offset())
        # a backward that writes over a donated value it holds alone gets it detached: the
        # view would keep `owner` alive, a second user of the storage its check counts
        recording_args[position] = view.detach() if function.writes_donated else view
        taken[(id(node), group)] = (node, group)
        positions.add(position)
    donors: list[Node] = []
    for node, group in taken.values():
        node.give_up(group, recorder)
        if node not in donors:
            donors.append(node)
    return donors, positions
