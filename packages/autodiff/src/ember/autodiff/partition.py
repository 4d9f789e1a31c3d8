"""Partitioning a joint Graph into a forward Graph and a backward Graph.

The forward computes the outputs and the values the backward needs ("saved"); the backward
takes the saved values and the tangents and returns the gradients. `naive` saves every forward
value the backward reads; `min_cut` chooses the cheapest set of values to save (in bytes)
such that everything else the backward needs can be recomputed from them with cheap ops.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sympy

from ember.autodiff.dead_code import references
from ember.autodiff.duplicate_casts import merge_duplicate_casts
from ember.autodiff.errors import PartitionError
from ember.autodiff.joint import JointGraph
from ember.autodiff.mincut import FlowNetwork
from ember.autodiff.recompute_bans import (
    banned_for_extra_reads,
    banned_lone_recomputes,
    banned_narrowed_normalizations,
    banned_weight_copies,
)
from ember.autodiff.recompute_policy import (
    DEFAULT_POLICY,
    RECOMPUTABLE_OPS,
    RECOMPUTABLE_PRIM_FAMILIES,
    RecomputePolicy,
    is_fusible,
    is_recomputable,
    is_view,
    reads_from_memory,
    saving_cost,
)
from ember.prims import (
    Graph,
    GraphInput,
    InputKind,
    Node,
    Ref,
    TensorSpec,
    Value,
    tree_flatten,
)
from ember.prims.symbolic import evaluate_expr

PARTITIONERS = ("min_cut", "naive")
__all__ = [
    "PARTITIONERS",
    "RECOMPUTABLE_OPS",
    "RECOMPUTABLE_PRIM_FAMILIES",
    "Partition",
    "RecomputePolicy",
    "is_recomputable",
    "partition",
]


@dataclass
class Partition:
    """A forward Graph `(primals...) -> (outputs..., saved...)` and a backward Graph
    `(saved..., tangents...) -> (gradient per primal...)`."""

    forward: Graph
    backward: Graph
    saved: tuple[str, ...]  # the saved values, by their joint-Graph names
    saved_bytes: int
    num_forward_outputs: int


def partition(
    joint: JointGraph,
    partitioner: str = "min_cut",
    resident: Collection[int] = (),
    policy: RecomputePolicy = DEFAULT_POLICY,
) -> Partition:
    """Split `joint` with the named partitioner (`min_cut` or `naive`).

    `resident` are the indices of primals that stay alive beyond the step anyway (parameters,
    buffers): the min cut saves them at no cost."""
    started = time.perf_counter()
    if partitioner == "min_cut":
        joint = merge_duplicate_casts(joint)
    graph = joint.graph
    layout = _Layout(joint)
    if partitioner == "min_cut":
        free = {layout.primals[i] for i in resident if i < len(layout.primals)}
        saved = _min_cut_saved(layout, free, policy)
    elif partitioner == "naive":
        saved = _naive_saved(layout)
    else:
        raise PartitionError(
            f"unknown partitioner {partitioner!r}; choose one of {', '.join(PARTITIONERS)}"
        )
    saved = _with_size_carriers(layout, saved)
    forward = _forward_graph(layout, saved)
    backward = _backward_graph(layout, saved)
    elapsed = f"{(time.perf_counter() - started) * 1e3:.1f}"
    # how many of the forward's outputs (the last ones) only the backward reads, as its
    # first inputs: a compiler may return those in strides of its choice (channels-last)
    forward.meta = {
        "pass": f"partition.{partitioner}",
        "time_ms": elapsed,
        "saved_outputs": str(len(saved)),
    }
    backward.meta = {
        "pass": f"partition.{partitioner}",
        "time_ms": elapsed,
        "saved_inputs": str(len(saved)),
    }
    forward.name = graph.name.removesuffix("_joint") + "_forward"
    backward.name = graph.name.removesuffix("_joint") + "_backward"
    size = sum(_bytes(layout.values[name], layout.hints) for name in saved)
    return Partition(forward, backward, tuple(saved), size, joint.num_forward_outputs)


class _Layout:
    """The joint Graph's parts: primals, tangents, outputs, producers, tangent dependence."""

    def __init__(self, joint: JointGraph) -> None:
        graph = joint.graph
        self.graph = graph
        self.values = graph.values()
        leaves = [leaf.name for leaf in graph.input_leaves]
        self.primals = leaves[: joint.num_primals]
        self.tangents = leaves[joint.num_primals :]
        self.constants = {gi.value.name for gi in graph.inputs if gi.kind is InputKind.CONSTANT}
        outputs = graph.output_leaves
        self.forward_outputs: list[Any] = list(outputs[: joint.num_forward_outputs])
        self.gradients: list[Any] = list(outputs[joint.num_forward_outputs :])
        self.producer: dict[str, int] = {}
        for index, node in enumerate(graph.nodes):
            for value in node.output_values():
                self.producer[value.name] = index
        self.tangent_dependent: set[str] = set(self.tangents)
        for node in graph.nodes:
            if any(ref.name in self.tangent_dependent for ref in references(node)):
                self.tangent_dependent.update(v.name for v in node.output_values())
        self.users: dict[str, list[int]] = {}
        for index, node in enumerate(graph.nodes):
            for ref in references(node):
                self.users.setdefault(ref.name, []).append(index)
        self.order = {name: i for i, name in enumerate(self.values)}
        self.hints = {
            name: info.hint for name, info in graph.symbols.items() if info.hint is not None
        }

    def ancestors(self, roots: Iterable[str], stop: set[str]) -> set[str]:
        """Every value `roots` depend on, not looking past `stop` (which are included)."""
        seen: set[str] = set()
        pending = list(roots)
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in stop or name not in self.producer:
                continue
            node = self.graph.nodes[self.producer[name]]
            pending.extend(ref.name for ref in references(node))
        return seen

    def forward_refs(self) -> list[str]:
        return [leaf.name for leaf in self.forward_outputs if isinstance(leaf, Ref)]

    def gradient_refs(self) -> list[str]:
        return [leaf.name for leaf in self.gradients if isinstance(leaf, Ref)]

    def backward_reads(self) -> set[str]:
        """Tangent-independent values that backward (tangent-dependent) nodes read, plus the
        tangent-independent gradients themselves."""
        reads: set[str] = set()
        for node in self.graph.nodes:
            outputs = [v.name for v in node.output_values()]
            if not any(name in self.tangent_dependent for name in outputs):
                continue
            reads.update(
                ref.name for ref in references(node) if ref.name not in self.tangent_dependent
            )
        reads.update(name for name in self.gradient_refs() if name not in self.tangent_dependent)
        return reads - self.constants


def _with_size_carriers(layout: _Layout, saved: list[str]) -> list[str]:
    """`saved` plus, for each size symbol that no saved value or tangent has as a dim, a
    primal that has it: a compiled backward reads its symbols from its inputs' sizes (the
    gradient of `x.sum_to_size(1, 4)` is `[s0, s1]` but its only input is `[1, 4]`: the
    backward's wrapper raised NameError: s0). A primal is a tensor the caller passed: saving
    it copies nothing."""
    if not layout.graph.symbols:
        return saved

    def dims(names: Iterable[str]) -> set[str]:
        found: set[str] = set()
        for name in names:
            spec = layout.values[name].spec
            if isinstance(spec, TensorSpec):
                found.update(str(s) for s in spec.shape if isinstance(s, sympy.Symbol))
        return found

    have = dims([*saved, *layout.tangents])
    carriers = []
    for name in layout.primals:
        held = dims([name])
        if held - have:
            carriers.append(name)
            have |= held
    if not carriers:
        return saved
    return sorted({*saved, *carriers}, key=layout.order.__getitem__)


def _naive_saved(layout: _Layout) -> list[str]:
    """Save every value the forward computes (or takes) that the backward reads."""
    forward = layout.ancestors(layout.forward_refs(), set()) | set(layout.primals)
    needed = layout.ancestors(
        layout.gradient_refs(), forward | set(layout.tangents) | layout.constants
    )
    saved = {name for name in needed if name in forward} - layout.constants
    return sorted(saved, key=layout.order.__getitem__)


def _min_cut_saved(layout: _Layout, free: set[str], policy: RecomputePolicy) -> list[str]:
    """Save the cheapest set of values that separates the inputs from what the backward reads,
    where only cheap (recomputable) ops may be computed again in the backward.

    The flow network: for every tangent-free value `v` an edge `v:in -> v:out` whose capacity
    is the cost of saving `v` (`saving_cost`); infinite edges from `source` to primals,
    forward outputs and values the backward must not recompute; infinite edges `a:out -> v:in`
    for each argument `a` of `v`'s op, and from every value a backward node reads to `sink`.
    The saved values are the edges a minimum cut severs."""
    candidates = [
        name
        for name in layout.values
        if name not in layout.tangent_dependent and name not in layout.constants
    ]
    sizes = {name: _bytes(layout.values[name], layout.hints) for name in candidates}
    distance = _distance_from_backward(layout)
    forward_outputs = set(layout.forward_refs())
    # A view as large as its base (a reshape, a transpose) is never saved: the cut saves the
    # base and the backward takes the view again, so one storage is not counted twice. A
    # smaller view (select, slice) may be saved for its own size.
    views = {
        name
        for name in candidates
        if name in layout.producer
        and name not in forward_outputs
        and _whole_view(layout, name, sizes)
    }
    weights: dict[str, int] = {}
    for name in candidates:
        if name in free:
            weights[name] = 0
            continue
        # a matmul's or a reduction's result is in memory whatever the cut: saving it adds
        # no write (an 8192 x 32000 bf16 LM-head product priced as twice its bytes lost
        # to its float32 log-softmax, which the forward never needs in memory)
        fused = (
            name in layout.producer
            and is_fusible(layout.graph.nodes[layout.producer[name]].target)
            and all(
                is_fusible(layout.graph.nodes[user].target) for user in layout.users.get(name, ())
            )
        )
        weights[name] = saving_cost(sizes[name], distance.get(name, 0), fused, policy)
    infinite = sum(weights.values()) + 1
    for name in views:
        weights[name] = infinite
    network = FlowNetwork()
    network.vertex("source")
    network.vertex("sink")
    # Values the forward computes anyway; the rest is computed once, in whichever half.
    forward_required = layout.ancestors(forward_outputs, set())
    extra_read_bans: set[str] = set()
    if policy.ban_recompute_reading_more:
        extra_read_bans = banned_for_extra_reads(
            [name for name in candidates if name in forward_required],
            layout.graph.nodes,
            layout.producer,
            sizes,
            free | forward_outputs | set(layout.primals),
            layout.backward_reads(),
            layout.users,
            policy,
        )
    required = [name for name in candidates if name in forward_required]
    # values a non-fusible op reads in each half, and those a library kernel (a matmul, a
    # convolution, attention) reads in each, with its backward readers of that kind
    twice: list[str] = []
    library_twice: dict[str, list[int]] = {}
    for name in required:
        readers = _unfused_backward_readers(layout, name)
        forward_readers = _unfused_readers(layout, name, backward=False) if readers else []
        if not forward_readers:
            continue
        twice.append(name)
        library = [i for i in readers if reads_from_memory(layout.graph.nodes[i].target)]
        if library and any(
            reads_from_memory(layout.graph.nodes[i].target) for i in forward_readers
        ):
            library_twice[name] = library
    if policy.save_narrowed_normalizations:
        extra_read_bans |= banned_narrowed_normalizations(
            required,
            layout.graph.nodes,
            layout.producer,
            sizes,
            {name: _width(layout.values[name]) for name in candidates},
            free | forward_outputs | set(layout.primals),
            twice,
            extra_read_bans,
            policy,
        )
    if policy.save_lone_recomputes:
        extra_read_bans |= banned_lone_recomputes(
            required,
            layout.graph.nodes,
            layout.producer,
            sizes,
            layout.users,
            free,
            library_twice,
            [
                index
                for index, node in enumerate(layout.graph.nodes)
                if not any(v.name in forward_required for v in node.output_values())
            ],
            extra_read_bans,
            policy,
        )
    if policy.save_weight_copies:
        extra_read_bans |= banned_weight_copies(
            required, layout.graph.nodes, layout.producer, free, library_twice, extra_read_bans
        )
    for name in candidates:
        network.add_edge(f"{name}:in", f"{name}:out", weights[name])
        if name in forward_outputs or name not in layout.producer:
            network.add_edge("source", f"{name}:in", infinite)  # primals, forward outputs
    for node in layout.graph.nodes:
        outputs = [v.name for v in node.output_values() if v.name in weights]
        if not outputs:
            continue
        banned = any(name in forward_required for name in outputs) and (
            not is_recomputable(node.target)
            or any(name in extra_read_bans for name in outputs)
            or (
                policy.ban_materialized_in_backward
                and any(_materialized_in_backward(layout, name) for name in outputs)
            )
        )
        for name in outputs:
            if banned:
                network.add_edge("source", f"{name}:in", infinite)
            for ref in references(node):
                if ref.name in weights:
                    network.add_edge(f"{ref.name}:out", f"{name}:in", infinite)
    for name in layout.backward_reads():
        network.add_edge(f"{name}:out", "sink", infinite)
    source_side = network.min_cut("source", "sink")
    saved = [
        name
        for name in candidates
        if f"{name}:in" in source_side and f"{name}:out" not in source_side
    ]
    return sorted(saved, key=layout.order.__getitem__)


def _whole_view(layout: _Layout, name: str, sizes: Mapping[str, int]) -> bool:
    """Whether `name` is a view of an argument at least as large as that argument."""
    node = layout.graph.nodes[layout.producer[name]]
    if not is_view(node.target):
        return False
    bases = [ref.name for ref in references(node)]
    base_size = max(
        (sizes.get(base, _bytes(layout.values[base], layout.hints)) for base in bases), default=0
    )
    return sizes[name] >= base_size


def _distance_from_backward(layout: _Layout) -> dict[str, int]:
    """For each tangent-free value, the fewest ops between it and a backward node."""
    distance: dict[str, int] = {}
    far = 10**9
    for node in reversed(layout.graph.nodes):
        for value in node.output_values():
            name = value.name
            if name in layout.tangent_dependent:
                distance[name] = 0
                continue
            best = far
            for user in layout.users.get(name, ()):
                for out in layout.graph.nodes[user].output_values():
                    best = min(best, distance.get(out.name, far) + 1)
            distance[name] = best
    for name in layout.primals:
        best = far
        for user in layout.users.get(name, ()):
            for out in layout.graph.nodes[user].output_values():
                best = min(best, distance.get(out.name, far) + 1)
        distance[name] = best
    return distance


def _materialized_in_backward(layout: _Layout, name: str) -> bool:
    """Whether a backward op that cannot fuse it reads `name` (directly or through views):
    recomputing it would cost a kernel and a buffer in the backward."""
    return bool(_unfused_backward_readers(layout, name))


def _unfused_backward_readers(layout: _Layout, name: str) -> list[int]:
    """The backward ops that cannot fuse `name` and read it, directly or through views (none
    for a view: its base is what is written)."""
    if name not in layout.producer or is_view(layout.graph.nodes[layout.producer[name]].target):
        return []
    return _unfused_readers(layout, name, backward=True)


def _materialized_in_forward(layout: _Layout, name: str) -> bool:
    """Whether a forward op that cannot fuse it (a matmul) reads `name`, directly or through
    views: the forward writes it to memory whatever the cut."""
    return bool(_unfused_readers(layout, name, backward=False))


def _unfused_readers(layout: _Layout, name: str, backward: bool) -> list[int]:
    """The ops of one half (`backward` or the forward) that cannot fuse `name` and read it,
    directly or through views. The backward's readers are found through the forward's views
    too; the forward's are not looked for past a backward op."""
    found: list[int] = []
    pending, seen = [name], {name}
    while pending:
        current = pending.pop()
        for index in layout.users.get(current, ()):
            user = layout.graph.nodes[index]
            outputs = [v.name for v in user.output_values()]
            in_backward = any(out in layout.tangent_dependent for out in outputs)
            if in_backward and not backward:
                continue
            if in_backward == backward and not is_fusible(user.target):
                found.append(index)  # views are fusible: they are followed below
            if is_view(user.target):
                for out in outputs:
                    if out not in seen:
                        seen.add(out)
                        pending.append(out)
    return sorted(set(found))


def _width(value: Value) -> int:
    """Bytes an element of `value` takes (0 for non-tensors)."""
    spec = value.spec
    return spec.dtype.itemsize if isinstance(spec, TensorSpec) else 0


# ---- building the two Graphs ------------------------------------------------------------


def _forward_graph(layout: _Layout, saved: list[str]) -> Graph:
    graph = layout.graph
    stop = set(layout.primals) | layout.constants
    needed = layout.ancestors([*layout.forward_refs(), *saved], stop)
    if needed & set(layout.tangents):
        raise PartitionError("the forward would need a tangent; the joint Graph is malformed")
    nodes = [node for node in graph.nodes if any(v.name in needed for v in node.output_values())]
    inputs = [_input(layout, name) for name in layout.primals]
    outputs = [*layout.forward_outputs, *(Ref(name) for name in saved)]
    return _graph(layout, inputs, layout.primals, nodes, needed, outputs)


def _backward_graph(layout: _Layout, saved: list[str]) -> Graph:
    graph = layout.graph
    available = set(saved) | set(layout.tangents) | layout.constants
    needed = layout.ancestors(layout.gradient_refs(), available)
    missing = [name for name in needed if name not in available and name not in layout.producer]
    if missing:
        raise PartitionError(
            f"the backward needs {', '.join(sorted(missing))}, which the forward does not save; "
            "this is a bug in the partitioner"
        )
    chosen = [
        index
        for index, node in enumerate(graph.nodes)
        if any(v.name in needed and v.name not in available for v in node.output_values())
    ]
    nodes: list[Node] = []
    defined = set(available)
    for index in _recomputed_where_read(layout, chosen):
        nodes.append(_renamed_outputs(graph.nodes[index], defined))
        defined.update(v.name for v in nodes[-1].output_values())
    signature = [*saved, *layout.tangents]
    inputs = [_input(layout, name) for name in signature]
    return _graph(layout, inputs, signature, nodes, needed, list(layout.gradients))


def _recomputed_where_read(layout: _Layout, chosen: list[int]) -> list[int]:
    """The backward's nodes (`chosen`, joint-Graph indices in joint order) with each
    recomputed node moved down to just before the first node that reads it.

    In joint order every recomputed forward node precedes every backward node: a backward
    compiled in program order would compute them all at its start and hold each until its
    last reader (Llama's normalized block inputs and SiLU products for the whole network).
    Placed where first read, each lives from its reader's block of the backward on."""
    chosen_set = set(chosen)
    emitted: set[int] = set()
    order: list[int] = []

    def emit(index: int) -> None:
        # iterative post-order over the chosen producers of `index`'s arguments
        stack = [(index, False)]
        while stack:
            current, expanded = stack.pop()
            if current in emitted:
                continue
            if expanded:
                emitted.add(current)
                order.append(current)
                continue
            stack.append((current, True))
            producers = {
                layout.producer[ref.name]
                for ref in references(layout.graph.nodes[current])
                if ref.name in layout.producer
            }
            for producer in sorted(producers & chosen_set, reverse=True):
                if producer not in emitted:
                    stack.append((producer, False))

    for index in chosen:
        node = layout.graph.nodes[index]
        if any(v.name in layout.tangent_dependent for v in node.output_values()):
            emit(index)
    for index in chosen:  # tangent-free gradients, and anything no backward node read
        emit(index)
    return order


def _renamed_outputs(node: Node, defined: set[str]) -> Node:
    """`node`, its outputs that are already defined (saved) renamed to unused names."""

    def rename(value: Value) -> Value:
        if value.name not in defined:
            return value
        name = f"{value.name}_recomputed"
        while name in defined:
            name += "_"
        defined.add(name)
        return Value(name, value.spec)

    outputs: list[Any] = []
    for output in node.outputs:
        if isinstance(output, Value):
            outputs.append(rename(output))
        elif isinstance(output, list):
            outputs.append([rename(v) for v in output])
        else:
            outputs.append(output)
    return Node(node.target, node.args, node.kwargs, outputs, node.source)


def _input(layout: _Layout, name: str) -> GraphInput:
    return GraphInput(layout.values[name], InputKind.USER)


def _graph(
    layout: _Layout,
    inputs: list[GraphInput],
    signature: list[str],
    nodes: list[Node],
    needed: set[str],
    outputs: list[Any],
) -> Graph:
    source = layout.graph
    used_constants = [
        gi for gi in source.inputs if gi.kind is InputKind.CONSTANT and gi.value.name in needed
    ]
    refs = [Ref(name) for name in signature]
    graph = Graph(
        inputs=[*inputs, *used_constants],
        nodes=nodes,
        in_spec=tree_flatten(tuple(refs))[1],
        input_leaves=refs,
        out_spec=tree_flatten(tuple(outputs))[1],
        output_leaves=outputs,
        symbols=dict(source.symbols),
        guards=list(source.guards),
        constants={
            gi.target: source.constants[gi.target] for gi in used_constants if gi.target is not None
        },
    )
    return graph


def _bytes(value: Value, hints: Mapping[str, int]) -> int:
    """The size of a value in bytes (symbolic sizes at their hints)."""
    spec = value.spec
    if not isinstance(spec, TensorSpec):
        return 1
    count = 1
    for size in spec.shape:
        count *= int(size) if isinstance(size, int) else int(evaluate_expr(size, hints))
    return max(1, count * spec.dtype.itemsize)
