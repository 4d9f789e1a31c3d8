"""`GraphFunction`: a compiled graph handed to a CUDA graph tree, called like the graph.

`cudagraphify(call, ...)` wraps a compiled graph's `call(args) -> outputs` (the calling
convention of ember-inductor's wrappers). Each call goes through the tree of the graph's
device, which warms it up, records it, replays it or runs it as it is, with a logged reason.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ember.runtime.cudagraphs.static_inputs import Signature

_ids = itertools.count()


class FunctionMode(enum.Enum):
    """What a graph is to autograd: the tree starts a new step only when no backward is due."""

    INFERENCE = "inference"
    FORWARD = "forward"  # a training forward: its backward is pending until it runs
    BACKWARD = "backward"


@dataclass
class GraphFunction:
    """A compiled graph known to a tree: its id, static inputs and what the tree learnt."""

    name: str
    call: Callable[[list[Any]], Sequence[Any]]
    static_positions: frozenset[int]
    mode: FunctionMode = FunctionMode.INFERENCE
    # arguments the graph never reads (a CPU tensor there is fine): not checked, not copied
    unread_positions: frozenset[int] = frozenset()
    skip_reason: str | None = None  # set once: every call runs without CUDA graphs
    # a training forward's last `saved_outputs` outputs are saved values, read only by its
    # backward; a backward's arguments at `saved_positions` are those saved values
    saved_outputs: int = 0
    saved_positions: frozenset[int] = frozenset()
    # bytes a recording of it that starts a step reserves in the pool first, as one block its
    # buffers split (`cudagraph_reserve_block`; 0: none)
    reserve_bytes: int = 0
    # a backward whose code writes over a saved value it holds alone (inductor's
    # `wider_in_place`): donation hands it tensors that hold that memory alone (see `donation`)
    writes_donated: bool = False
    id: int = field(default_factory=lambda: next(_ids))
    warmed_up: set[Signature] = field(default_factory=set)
    recordings: int = 0
    logged: set[str] = field(default_factory=set)  # reason ids already logged for it
    checked_positions: list[int] | None = None  # arguments checked for CPU tensors per call
    dynamic_positions: list[int] | None = None  # the non-static arguments (set on first call)

    def signature(self, args: Sequence[Any]) -> Signature:
        """Metadata of the non-static arguments (static ones are checked by address, unread
        ones not at all)."""
        positions = self.dynamic_positions
        if positions is None:
            skipped = self.static_positions | self.unread_positions
            positions = self.dynamic_positions = [p for p in range(len(args)) if p not in skipped]
        return tuple([_metadata(args[p]) for p in positions])


def _metadata(arg: Any) -> Any:
    if isinstance(arg, torch.Tensor):
        return (arg.dtype, arg.shape, arg.stride(), arg.device)
    return (type(arg), arg)


class CudaGraphCall:
    """The callable that replaces a compiled graph's `call`: `call(args) -> outputs`."""

    def __init__(self, function: GraphFunction, device: torch.device) -> None:
        from ember.runtime.cudagraphs.tree import tree_for

        self.function = function
        self.tree = tree_for(device)

    def __call__(self, args: list[Any]) -> Sequence[Any]:
        return self.tree.run(self.function, args)

    def consuming(self, args: list[Any]) -> Sequence[Any]:
        """A backward's call whose caller dropped its saved values (autograd cleared them;
        not retain_graph=True): the tree may give their memory to the backward's own buffers
        (see `donation`)."""
        return self.tree.run(self.function, args, consumed=True)


def cudagraphify(
    call: Callable[[list[Any]], Sequence[Any]],
    *,
    name: str,
    device: torch.device,
    static_positions: Collection[int] = (),
    mutated_positions: Collection[int] = (),
    unread_positions: Collection[int] = (),
    mode: FunctionMode = FunctionMode.INFERENCE,
    host_tensor_at: str | None = None,
    saved_outputs: int = 0,
    saved_positions: Collection[int] = (),
    reserve_bytes: int = 0,
    writes_donated: bool = False,
) -> Callable[[list[Any]], Sequence[Any]]:
    """`call` run from CUDA graphs in the tree of `device` (see the package README).

    `static_positions` are the arguments that keep their address between calls (parameters
    and buffers): they are read in place. `mutated_positions` are arguments the graph writes:
    if one is not static, the graph runs without CUDA graphs (reason `mutated_input`), as it
    does when `host_tensor_at` names where the graph makes a CPU tensor (`cpu_in_graph`).
    `unread_positions` are arguments the graph never reads: they may be CPU tensors, and a
    recording neither copies nor checks them (torch's trees skip unused CPU inputs too).
    `saved_outputs` (a training forward: how many of its last outputs are saved values) and
    `saved_positions` (a backward: the arguments that are those values) let a backward's
    recording reuse the memory of saved values once it has read them, as an eager backward
    frees them. `reserve_bytes`: the planned peak of the graph's buffers below 128 MB, which
    a recording that starts a step reserves in the pool as one block before the graph runs
    when `EMBER_CUDAGRAPH_RESERVE_BLOCK` is on. `writes_donated`: the backward writes over a
    donated value when it holds it alone (its donated arguments are then tensors of their own
    over the memory, not views that keep the donor's tensor). `call` may empty the list it
    gets (the tree gives it a list of its own).
    """
    from ember.runtime.cudagraphs.reasons import CPU_GRAPH, CPU_IN_GRAPH, MUTATED_INPUT
    from ember.runtime.cudagraphs.tree import log_reason

    unread = frozenset(unread_positions)
    static = frozenset(static_positions) - unread
    function = GraphFunction(
        name,
        call,
        static,
        mode,
        unread_positions=unread,
        saved_outputs=saved_outputs,
        saved_positions=frozenset(saved_positions),
        reserve_bytes=reserve_bytes,
        writes_donated=writes_donated,
    )
    if device.type != "cuda":
        log_reason(function, CPU_GRAPH, graph=name, device=device)
        function.skip_reason = CPU_GRAPH.id
        return call
    if host_tensor_at is not None:
        log_reason(function, CPU_IN_GRAPH, graph=name, where=host_tensor_at)
        function.skip_reason = CPU_IN_GRAPH.id
        return call
    written = sorted(set(mutated_positions) - static)
    if written:
        log_reason(function, MUTATED_INPUT, graph=name, position=written[0])
        function.skip_reason = MUTATED_INPUT.id
        return call
    return CudaGraphCall(function, device)
