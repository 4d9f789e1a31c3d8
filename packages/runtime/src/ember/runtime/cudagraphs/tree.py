"""`CudaGraphTree`: which recorded graph a call replays, when to record, when a step begins.

One tree per CUDA device. Within a step the graphs called form a path from a root (the first
graph of the step) down the tree: a graph called after graph P is looked up among P's
children, so the forward, its backward and the graphs between graph breaks each get a node
recorded knowing what ran before it. A call that finds no node warms its graph up once
(runs it as it is), then records a new node. A new step begins when the user marks it, or
when a graph that starts a path is called again while no backward is pending; the outputs
handed out in the step before are then poisoned, because replays overwrite their memory.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ember.prims.config import load
from ember.prims.logs import topic_logger
from ember.runtime.config import RuntimeConfig
from ember.runtime.cudagraphs.donation import donatable_groups, donate
from ember.runtime.cudagraphs.function import FunctionMode, GraphFunction
from ember.runtime.cudagraphs.node import Node
from ember.runtime.cudagraphs.reasons import (
    CPU_TENSOR,
    DYNAMIC_SHAPES,
    OVERWRITTEN,
    PENDING_BACKWARD,
    RETAINED_SAVED,
    SAVED_VALUES_LIVE,
    STATIC_INPUT_MOVED,
    UNCAPTURABLE,
    Reason,
)
from ember.runtime.cudagraphs.recording import CaptureError, Recorder
from ember.runtime.cudagraphs.static_inputs import InputPlan, Signature
from ember.runtime.cudagraphs.warmup import run_watched

perf_hints = topic_logger("perf_hints")
logger = logging.getLogger("ember.runtime.cudagraphs")


def log_reason(function: GraphFunction, reason: Reason, **fields: Any) -> None:
    """Log `reason` for `function` once (perf_hints topic)."""
    if reason.id in function.logged:
        return
    function.logged.add(reason.id)
    perf_hints.warning("cudagraphs: %s", reason.format(**fields))


class CudaGraphTree:
    """The recorded graphs of one device, the path of the current step, and its outputs."""

    def __init__(
        self,
        recorder: Recorder,
        *,
        max_recordings: int | None = None,
        max_depth: int | None = None,
    ) -> None:
        config = load(RuntimeConfig)
        self.recorder = recorder
        self.max_recordings = max_recordings or config.cudagraph_max_recordings
        self.max_depth = max_depth or config.cudagraph_max_depth
        self.reserve_block = config.cudagraph_reserve_block
        self.roots: dict[int, list[Node]] = {}
        self.current: Node | None = None
        self.step = 0
        self.pending_backward = 0
        self.step_marked = False
        self.handed_out: list[tuple[weakref.ref[torch.Tensor], str]] = []
        self.backwards_run: dict[int, Node] = {}  # this step's replayed or recorded backwards
        # the parameters of the training forwards run (weakly): their `.grad` may be a
        # backward's output memory when a step begins
        self.parameters: dict[int, weakref.ref[torch.Tensor]] = {}
        self.moved = 0  # gradients moved out of a backward's memory when a step began
        self._noted: set[int] = set()  # forwards whose parameters are in `parameters`
        self.replays = 0
        self.eager_runs = 0

    # ---- the call path ------------------------------------------------------------------

    def run(
        self, function: GraphFunction, args: list[Any], consumed: bool = False
    ) -> Sequence[Any]:
        """Run `function` on `args`: replay, record or run it as it is. `consumed`: the
        caller of a backward dropped its saved values (see `donation`)."""
        if function.skip_reason is not None:
            return self._eager(function, args)
        cpu = self._host_position(function, args)
        if cpu is not None:
            log_reason(function, CPU_TENSOR, graph=function.name, position=cpu)
            return self._eager(function, args)
        if self.step_marked:
            self.new_step()
        signature = function.signature(args)
        node = self._find(function, signature, args)
        if node is None and self._starts_step(function):
            self.new_step()
            node = self._find(function, signature, args)
        self._count_backward(function)
        if function.mode is FunctionMode.FORWARD and function.id not in self._noted:
            self._note_parameters(function, args)
        if node is not None:
            if node.donors and not consumed:
                log_reason(function, RETAINED_SAVED, graph=function.name)
                return self._eager(function, args)
            return self._replay(node, args)
        if signature not in function.warmed_up:
            function.warmed_up.add(signature)
            return self._warm_up(function, args)
        if function.recordings >= self.max_recordings:
            log_reason(function, DYNAMIC_SHAPES, graph=function.name, count=function.recordings)
            return self._eager(function, args)
        if self.current is not None and self.current.depth + 1 >= self.max_depth:
            log_reason(function, PENDING_BACKWARD, graph=function.name, depth=self.max_depth)
            return self._eager(function, args)
        return self._record(function, signature, args, consumed)

    def _count_backward(self, function: GraphFunction) -> None:
        if function.mode is FunctionMode.FORWARD:
            self.pending_backward += 1
        elif function.mode is FunctionMode.BACKWARD:
            self.pending_backward = max(0, self.pending_backward - 1)

    def _note_parameters(self, function: GraphFunction, args: list[Any]) -> None:
        """Remember the leaves a training forward takes as static inputs (its parameters):
        their gradients are what its backward hands to autograd."""
        self._noted.add(function.id)
        for position in function.static_positions:
            arg = args[position] if position < len(args) else None
            if isinstance(arg, torch.Tensor) and arg.requires_grad and arg.is_leaf:
                self.parameters[id(arg)] = weakref.ref(arg)

    def _move_gradients(self) -> None:
        """Give each parameter whose `.grad` is still a backward's output memory (kept over
        steps: accumulated, or zeroed in place) memory of its own, values and identity kept:
        this step's replays will overwrite that memory."""
        held: list[torch.Tensor] = []
        dead = []
        for key, ref in self.parameters.items():
            parameter = ref()
            if parameter is None:
                dead.append(key)
            elif parameter.grad is not None:
                held.append(parameter.grad)
        if held:  # the usual step zeroed them (set to None): nothing to look up
            owned: set[int] = set()
            for backward in self.backwards_run.values():
                owned |= backward.owned_storages()
            for grad in held:
                if grad.untyped_storage().data_ptr() in owned:
                    copy = grad.clone()
                    with torch.no_grad():
                        grad.set_(copy.untyped_storage(), copy.storage_offset(), copy.shape,
                                  copy.stride())  # fmt: skip
                    self.moved += 1
        for key in dead:
            del self.parameters[key]

    def _starts_step(self, function: GraphFunction) -> bool:
        """With no backward due, a call starts a new step when it calls the graph that began
        this step's path again (the next iteration), or when no output of the step is alive."""
        if self.current is None or self.pending_backward > 0:
            return False
        root = self.current
        while root.parent is not None:
            root = root.parent
        if root.function.id == function.id:
            return True
        node: Node | None = self.current
        while node is not None:
            if not node.holds_nothing_handed_out():
                return False
            node = node.parent
        return all(ref() is None for ref, _ in self.handed_out)

    def _find(self, function: GraphFunction, signature: Signature, args: list[Any]) -> Node | None:
        siblings = self.roots if self.current is None else self.current.children
        for node in siblings.get(function.id, ()):
            if node.signature != signature:
                continue
            moved = node.inputs.moved(args)
            if moved is None:
                return node
            if moved in node.inputs.static_positions:
                log_reason(function, STATIC_INPUT_MOVED, graph=function.name, position=moved)
        return None

    def _replay(self, node: Node, args: list[Any]) -> Sequence[Any]:
        node.inputs.copy_in(args)
        node.recording.replay()
        self.current = node
        self.replays += 1
        return self._hand_out(node, args)

    def _record(
        self, function: GraphFunction, signature: Signature, args: list[Any], consumed: bool
    ) -> Sequence[Any]:
        path = self._path()
        donor = _awaiting_donee(path)
        if donor is not None:
            log_reason(function, SAVED_VALUES_LIVE, graph=function.name,
                       forward=donor.function.name)  # fmt: skip
            return self._eager(function, args)
        inputs = InputPlan.build(
            args,
            function.static_positions,
            set().union(*(node.owned_addresses() for node in path)),
            function.unread_positions,
            set().union(*(node.state_storages for node in path)),
        )
        recording_args = inputs.recording_args(args)
        arg_storages = [
            (arg.untyped_storage().data_ptr(), int(arg.storage_offset()))
            if isinstance(arg, torch.Tensor)
            else None
            for arg in recording_args
        ]
        donors: list[Node] = []
        if consumed:
            donors, donated = donate(path, function, recording_args, self.recorder, args)
            for position in donated:  # freed while capturing: outputs there are not views
                arg_storages[position] = None
        try:
            # the call empties the list: donated saved values are freed after their last read
            # a step's first graph may reserve its buffers' block (see function.reserve_bytes)
            reserve = self._block(function, not path) if self.reserve_block else 0
            recording = self.recorder.record(function.call, recording_args, reserve)
        except CaptureError as error:
            log_reason(function, UNCAPTURABLE, graph=function.name, error=error)
            function.skip_reason = UNCAPTURABLE.id
            return self._eager(function, args)
        function.recordings += 1
        node = Node.create(function, self.current, signature, inputs, recording, arg_storages)
        node.donatable = donatable_groups(node)
        node.donors = donors
        for donor_node in donors:
            donor_node.donee = node
        siblings = self.roots if self.current is None else self.current.children
        siblings.setdefault(function.id, []).append(node)
        logger.info(
            "cudagraphs: recorded %s (recording %d of it, depth %d, %d inputs copied)",
            function.name,
            function.recordings,
            node.depth,
            len(inputs.copied_positions),
        )
        self.current = node
        return self._hand_out(node, args)

    def _hand_out(self, node: Node, args: list[Any]) -> Sequence[Any]:
        results, fresh = node.hand_out(self.recorder, args, self.step)
        if node.function.mode is FunctionMode.BACKWARD:
            self.backwards_run[id(node)] = node
        if fresh:
            message = OVERWRITTEN.format(graph=node.function.name, step=self.step)
            self.handed_out.extend((weakref.ref(t), message) for t in fresh)
        return results

    def _warm_up(self, function: GraphFunction, args: list[Any]) -> Sequence[Any]:
        """The first run with a signature, as it is, watched for what a capture cannot take."""
        self.eager_runs += 1
        if self.reserve_block:  # in the pool while it holds no recording, the block first
            with self.recorder.warm_up(self._block(function, self.current is None)):
                results, problem = run_watched(function.call, args, self.recorder.on_device)
        else:
            results, problem = run_watched(function.call, args, self.recorder.on_device)
        if problem is not None:
            log_reason(function, UNCAPTURABLE, graph=function.name, error=problem)
            function.skip_reason = UNCAPTURABLE.id
        return results

    @staticmethod
    def _block(function: GraphFunction, first: bool) -> int:
        """The bytes `function` reserves before it runs: its block when it is the step's
        first graph (a backward never is)."""
        if not first or function.mode is FunctionMode.BACKWARD:
            return 0
        return function.reserve_bytes

    def _eager(self, function: GraphFunction, args: list[Any]) -> Sequence[Any]:
        self.eager_runs += 1
        return function.call(args)

    def _host_position(self, function: GraphFunction, args: list[Any]) -> int | None:
        """The first argument a graph cannot read (a CPU tensor). Parameters and buffers are
        checked once: a replay finds them at their recorded (device) address. Arguments the
        graph never reads are not checked."""
        on_device = self.recorder.on_device
        positions = function.checked_positions
        if positions is None:
            unread = function.unread_positions
            positions = function.checked_positions = [
                p
                for p, arg in enumerate(args)
                if p not in unread and (p not in function.static_positions or not on_device(arg))
            ]
        for position in positions:
            arg = args[position]
            if isinstance(arg, torch.Tensor) and not on_device(arg):
                return position
        return None

    def _path(self) -> list[Node]:
        """The nodes of this step's path, the current one first."""
        path: list[Node] = []
        node = self.current
        while node is not None:
            path.append(node)
            node = node.parent
        return path

    # ---- steps ----------------------------------------------------------------------------

    def mark_step_begin(self) -> None:
        """The next call starts a new step (see `ember.cudagraph_mark_step_begin`)."""
        self.step_marked = True

    def new_step(self) -> None:
        """Poison the outputs handed out so far that are still alive; start at the roots."""
        node = self.current
        while node is not None:
            node.release_held(self.recorder, self.step)
            node = node.parent
        if self.backwards_run:
            self._move_gradients()
            for backward in self.backwards_run.values():
                message = OVERWRITTEN.format(graph=backward.function.name, step=self.step)
                backward.poison_held(self.recorder, message)
            self.backwards_run.clear()
        for ref, message in self.handed_out:
            tensor = ref()
            if tensor is not None:
                self.recorder.invalidate(tensor, message)
        self.handed_out.clear()
        self.current = None
        self.step += 1
        self.step_marked = False
        self.pending_backward = 0

    def nodes(self) -> Iterator[Node]:
        """Every recorded node of the tree."""
        stack = [node for nodes in self.roots.values() for node in nodes]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(child for nodes in node.children.values() for child in nodes)

    def node_count(self) -> int:
        return sum(1 for _ in self.nodes())


def _awaiting_donee(path: Sequence[Node]) -> Node | None:
    """A node on `path` whose saved values went to a backward not yet on it: until that
    backward runs, their memory is live though the pool counts it free."""
    on_path = {id(node) for node in path}
    for node in path:
        if node.donee is not None and id(node.donee) not in on_path:
            return node
    return None


# ---- one tree per device ------------------------------------------------------------------

_trees: dict[int, CudaGraphTree] = {}
_recorder_factory: list[Callable[[torch.device], Recorder]] = []


def _cuda_recorder(device: torch.device) -> Recorder:
    from ember.runtime.cudagraphs.pool import MemoryPool
    from ember.runtime.cudagraphs.recording import CudaRecorder

    return CudaRecorder(MemoryPool(device, load(RuntimeConfig).cudagraph_reserve_block))


def set_recorder_factory(factory: Callable[[torch.device], Recorder] | None) -> None:
    """Make new trees record with `factory(device)` (tests pass a fake); None: CUDA again.
    Existing trees are forgotten."""
    reset_trees()
    _recorder_factory.clear()
    if factory is not None:
        _recorder_factory.append(factory)


def tree_for(device: torch.device) -> CudaGraphTree:
    """The tree of `device` (made on first use, with one memory pool)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    tree = _trees.get(index)
    if tree is None:
        factory = _recorder_factory[-1] if _recorder_factory else _cuda_recorder
        tree = _trees[index] = CudaGraphTree(factory(torch.device("cuda", index)))
    return tree


def trees() -> list[CudaGraphTree]:
    return list(_trees.values())


def reset_trees() -> None:
    """Forget every tree (their graphs and pools are freed once no output refers to them)."""
    for tree in _trees.values():
        tree.new_step()
    _trees.clear()
