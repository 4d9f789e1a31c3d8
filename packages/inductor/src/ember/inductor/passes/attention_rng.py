"""Attention without dropout reads no random state: its backward gets a fresh placeholder.

Memory-efficient attention returns a philox seed and offset, and its backward takes them
back. Without dropout nothing reads them, and on a GPU torch returns them as
empty CPU tensors: a training forward saves them, and the backward Graph gets CPU tensors as
inputs, which a CUDA graph cannot take (mode="reduce-overhead" ran every such backward
without CUDA graphs). For each attention backward whose `dropout_p` is 0 this pass passes a
0-d int64 tensor made in the Graph, on the gradient's device (one for the whole Graph),
instead, so the saved ones go unread (`unread_inputs`); a CUDA graph tree need not take an
unread input, as torch's trees skip unused CPU inputs. With dropout the seed and offset are
read and stay as they are. mode="reduce-overhead" runs it on backward Graphs.
"""

from __future__ import annotations

import time

import torch

from ember.inductor.passes.rebuild import rebuild, renamed_node
from ember.prims import Graph, Node, Ref, TensorSpec, Value
from ember.prims.ops import op_schema

# attention backward ops whose `philox_seed` and `philox_offset` only dropout reads. Flash
# attention's RNG state is a device tensor already (bf16 backwards record as they are), and
# cuDNN's is not known to go unread: both stay out.
ATTENTION_BACKWARDS = frozenset({"aten::_scaled_dot_product_efficient_attention_backward.default"})
RNG_ARGUMENTS = ("philox_seed", "philox_offset")


def drop_unread_attention_rng(graph: Graph) -> Graph:
    """`graph`, with the RNG arguments of its dropout-free attention backwards replaced by a
    placeholder made in the Graph (the same Graph if it has none)."""
    started = time.perf_counter()
    values = graph.values()
    names = set(values)
    nodes: list[Node] = []
    placeholders: dict[torch.device, str] = {}  # one for every backward on a device
    for node in graph.nodes:
        positions = _unread_rng_positions(node)
        spec = _gradient_spec(values, node)
        if not positions or spec is None:
            nodes.append(node)
            continue
        name = placeholders.get(spec.device)
        if name is None:
            name = placeholders[spec.device] = _fresh("unread_rng", names)
            placeholder = Value(name, TensorSpec(torch.int64, (), (), spec.device))
            kwargs = {"dtype": torch.int64, "device": spec.device}
            nodes.append(Node("aten::zeros.default", [[]], kwargs, [placeholder], node.source))
        replaced = renamed_node(node, {})
        for position in positions:
            replaced.args[position] = Ref(name)
        nodes.append(replaced)
    if len(nodes) == len(graph.nodes):
        return graph
    return rebuild(graph, nodes, pass_name="drop_unread_attention_rng", started=started)


def unread_inputs(graph: Graph) -> set[int]:
    """Positions of the tensor inputs of the Graph that no node and no output reads. An input
    with a size symbol in its shape is read (the wrapper binds the symbol from it, and a
    replay must match its shape), and so is every non-tensor input (a number may be a
    symbol's value, which nodes use without a reference)."""
    read: set[str] = set()
    for node in graph.nodes:
        for arg in (*node.args, *node.kwargs.values()):
            _collect(arg, read)
    for leaf in graph.output_leaves:
        _collect(leaf, read)
    return {
        position
        for position, graph_input in enumerate(graph.inputs)
        if graph_input.value.name not in read and _static_tensor(graph_input.value.spec)
    }


def _static_tensor(spec: object) -> bool:
    return isinstance(spec, TensorSpec) and spec.is_static()


# memory-efficient attention ops whose dropout draws philox state that torch returns as CPU
# tensors outside a CUDA graph capture and as device tensors inside one
EFFICIENT_ATTENTION = frozenset(
    {
        "aten::_scaled_dot_product_efficient_attention.default",
        "aten::_efficient_attention_forward.default",
        *ATTENTION_BACKWARDS,
        "aten::_efficient_attention_backward.default",
    }
)


def dropout_attention_at(graph: Graph) -> str | None:
    """Where a node of `graph` runs memory-efficient attention with dropout, as `op at
    file:line` (None if none does). Its philox seed and offset are CPU tensors made inside the
    Graph outside a capture and device tensors inside one, a switch CUDA graph trees do not
    handle yet: training a float32 GPT-2 with attention dropout under mode="reduce-overhead"
    crashed the process in the backward on the H100. Such graphs run without CUDA graphs."""
    for node in graph.nodes:
        if node.target not in EFFICIENT_ATTENTION:
            continue
        schema = op_schema(node.target)
        names = [argument.name for argument in schema.arguments] if schema is not None else []
        if "dropout_p" not in names:
            continue
        position = names.index("dropout_p")
        dropout = node.kwargs.get(
            "dropout_p", node.args[position] if position < len(node.args) else 0
        )
        if dropout == 0:
            continue
        where = f" at {node.source.short()}" if node.source is not None else ""
        return f"{node.target}{where} (dropout {dropout}: its philox seed and offset)"
    return None


def _unread_rng_positions(node: Node) -> list[int]:
    """The argument positions of `node`'s philox seed and offset if its dropout is 0."""
    if node.target not in ATTENTION_BACKWARDS:
        return []
    schema = op_schema(node.target)
    if schema is None:
        return []
    names = [argument.name for argument in schema.arguments]
    if "dropout_p" not in names or any(name not in names for name in RNG_ARGUMENTS):
        return []
    dropout = names.index("dropout_p")
    if dropout >= len(node.args) or node.args[dropout] != 0:
        return []  # dropout on (or given as a value computed in the Graph): the RNG is read
    positions = [names.index(name) for name in RNG_ARGUMENTS]
    if any(position >= len(node.args) for position in positions):
        return []
    return positions


def _gradient_spec(values: dict[str, Value], node: Node) -> TensorSpec | None:
    """The spec of the backward's first argument (the output's gradient)."""
    first = node.args[0] if node.args else None
    value = values.get(first.name) if isinstance(first, Ref) else None
    spec = value.spec if value is not None else None
    return spec if isinstance(spec, TensorSpec) else None


def _fresh(stem: str, names: set[str]) -> str:
    index = 0
    while f"{stem}_{index}" in names:
        index += 1
    name = f"{stem}_{index}"
    names.add(name)
    return name


def _collect(arg: object, into: set[str]) -> None:
    if isinstance(arg, Ref):
        into.add(arg.name)
    elif isinstance(arg, (list, tuple)):
        for item in arg:
            _collect(item, into)
