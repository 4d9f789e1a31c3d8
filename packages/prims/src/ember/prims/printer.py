"""Readable printing: a Graph as short, valid-looking Python, one line per node.

Each run of nodes that came from the same user line is headed by that line as a comment, so
logs and errors show the user's program next to what it became.
"""

from __future__ import annotations

import os
from typing import Any

import sympy
import torch

from ember.prims.graph import Graph, Node, Ref, SubgraphRef, Value
from ember.prims.pytree import tree_unflatten
from ember.prims.specs import DTYPE_NAMES, LAYOUT_NAMES, MEMORY_FORMAT_NAMES, ScalarSpec


def format_graph(graph: Graph, *, indent: str = "    ") -> str:
    """The Graph as Python source text."""
    lines: list[str] = []
    user = [gi.value for gi in graph.user_inputs()]
    signature = ", ".join(f"{v.name}: {_annotation(v)}" for v in user)
    lines.append(f"def {graph.name}({signature}):")
    if graph.meta:
        lines.append(indent + "# " + ", ".join(f"{k}={v}" for k, v in graph.meta.items()))
    if (
        graph.in_spec.kind != "tuple"
        or any(child.kind != "leaf" for child in graph.in_spec.children)
        or any(not isinstance(leaf, Ref) for leaf in graph.input_leaves)
    ):
        structure = tree_unflatten([_arg(a) for a in graph.input_leaves], graph.in_spec)
        lines.append(indent + f"# inputs: {_tuple_text(structure)}")
    for symbol in graph.symbols.values():
        upper = "inf" if symbol.upper is None else str(symbol.upper)
        lines.append(
            indent + f"# symbol {symbol.name} in [{symbol.lower}, {upper}], hint {symbol.hint}"
        )
    for guard in graph.guards:
        where = f"  ({guard.source.short()})" if guard.source else ""
        lines.append(indent + f"# guard {guard.expr}{where}")
    for graph_input in graph.state_inputs():
        value = graph_input.value
        lines.append(
            indent + f"{value.name}: {_annotation(value)} = "
            f"state[{graph_input.target!r}]  # {graph_input.kind.value}"
        )
    last_source: Any = None
    for node in graph.nodes:
        if node.source is not None and node.source != last_source:
            code = f": {node.source.code}" if node.source.code else ""
            lines.append(
                indent + f"# {os.path.basename(node.source.file)}:{node.source.line}{code}"
            )
        last_source = node.source
        lines.append(indent + _node_line(node))
    outputs = tree_unflatten([_arg(a) for a in graph.output_leaves], graph.out_spec)
    lines.append(indent + f"return {_tuple_text(outputs)}")
    for name, subgraph in graph.subgraphs.items():
        lines.append("")
        lines.append(f"# subgraph {name}")
        lines.append(format_graph(subgraph, indent=indent))
    return "\n".join(lines)


def _node_line(node: Node) -> str:
    call = f"{_op_text(node.target)}({_call_args(node)})"
    targets = [_output_text(output) for output in node.outputs]
    if not targets:
        return call
    if len(node.outputs) == 1 and isinstance(node.outputs[0], Value):
        value = node.outputs[0]
        return f"{value.name}: {_annotation(value)} = {call}"
    return f"{', '.join(targets)} = {call}"


def _output_text(output: Value | list[Value] | None) -> str:
    if output is None:
        return "_"
    if isinstance(output, Value):
        return output.name
    return "[" + ", ".join(value.name for value in output) + "]"


def _op_text(target: str) -> str:
    namespace, _, rest = target.partition("::")
    return f"{namespace}.{rest}"


def _call_args(node: Node) -> str:
    parts = [_arg_text(a) for a in node.args]
    parts += [f"{key}={_arg_text(a)}" for key, a in node.kwargs.items()]
    return ", ".join(parts)


class _Name:
    """Prints as a bare name (for references inside structures)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _arg(arg: Any) -> Any:
    return _Name(_arg_text(arg))


def _arg_text(arg: Any) -> str:
    if isinstance(arg, Ref):
        return arg.name
    if isinstance(arg, SubgraphRef):
        return f"subgraphs.{arg.name}"
    if isinstance(arg, list):
        return "[" + ", ".join(_arg_text(item) for item in arg) + "]"
    if isinstance(arg, torch.dtype):
        return f"torch.{DTYPE_NAMES.get(arg, str(arg))}"
    if isinstance(arg, torch.device):
        return f"device({str(arg)!r})"
    if isinstance(arg, torch.layout):
        return f"torch.{LAYOUT_NAMES.get(arg, str(arg))}"
    if isinstance(arg, torch.memory_format):
        return f"torch.{MEMORY_FORMAT_NAMES.get(arg, str(arg))}"
    if isinstance(arg, sympy.Basic):
        return str(arg)
    if isinstance(arg, float) and (arg != arg or arg in (float("inf"), float("-inf"))):
        return f"float({str(arg)!r})"
    return repr(arg)


def _tuple_text(structure: Any) -> str:
    if isinstance(structure, tuple) and len(structure) == 1:
        return f"({structure[0]!r},)"
    return repr(structure)


def _annotation(value: Value) -> str:
    spec = value.spec
    if isinstance(spec, ScalarSpec):
        return f'"{spec.short()}"'
    return f'"{spec.short()}"'
