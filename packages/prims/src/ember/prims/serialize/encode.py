"""Graph -> JSON document plus blob (the writer half of the format).

The document mirrors the Graph field by field (docs/graph-format.md); constant tensors go
to the blob. Anything a Graph should not hold (a live object, an unnamed dtype, a size
beyond the format's bounds) raises GraphFormatError naming its path.
"""

from __future__ import annotations

from typing import Any

import sympy

from ember.prims.errors import GraphFormatError
from ember.prims.graph import Graph, GraphInput, InputKind, Node, ShapeGuard, Value
from ember.prims.pytree import TreeSpec
from ember.prims.serialize.constants import BlobWriter
from ember.prims.serialize.limits import (
    INT64_MAX,
    INT64_MIN,
    MAX_NDIM,
    MAX_SIZE,
    MAX_SUBGRAPH_DEPTH,
    MAX_TREE_DEPTH,
)
from ember.prims.serialize.literals import encode_arg, encode_device, encode_dtype
from ember.prims.serialize.scalars import encode_int
from ember.prims.serialize.symexpr import encode_expr
from ember.prims.source import SourceLocation
from ember.prims.specs import ScalarSpec, SymbolInfo, TensorSpec

SCALAR_TYPES = ("int", "float", "bool", "complex")


def encode_document(graph: Graph) -> tuple[dict[str, Any], bytes]:
    """The JSON document (plain dicts and lists) of `graph` and the blob of its constants."""
    blob = BlobWriter()
    document = {"graph": _graph(graph, "graph", blob, 0)}
    return document, blob.getvalue()


def _fail(path: str, message: str) -> GraphFormatError:
    return GraphFormatError(f"cannot serialize {path}: {message}")


def _string(value: Any, path: str) -> str:
    if type(value) is not str:
        raise _fail(path, f"expected a str, got {type(value).__name__}")
    return value


def _int(value: Any, path: str, low: int, high: int) -> Any:
    if type(value) is not int or not low <= value <= high:
        raise _fail(path, f"expected an int in [{low}, {high}], got {value!r}")
    return encode_int(value, path)


def _table(table: Any, path: str) -> list[tuple[str, Any]]:
    if type(table) is not dict:
        raise _fail(path, f"expected a dict, got {type(table).__name__}")
    return [(_string(key, f"{path} key {key!r}"), item) for key, item in table.items()]


def _graph(graph: Graph, path: str, blob: BlobWriter, depth: int) -> dict[str, Any]:
    if not isinstance(graph, Graph):
        raise _fail(path, f"expected a Graph, got {type(graph).__name__}")
    if depth > MAX_SUBGRAPH_DEPTH:
        raise _fail(path, f"sub-graphs nested deeper than {MAX_SUBGRAPH_DEPTH}")
    return {
        "name": _string(graph.name, f"{path}.name"),
        "meta": {
            key: _string(value, f"{path}.meta[{key!r}]")
            for key, value in _table(graph.meta, f"{path}.meta")
        },
        "symbols": {
            name: _symbol(name, info, f"{path}.symbols[{name!r}]")
            for name, info in _table(graph.symbols, f"{path}.symbols")
        },
        "inputs": [
            _input(graph_input, f"{path}.inputs[{index}]")
            for index, graph_input in enumerate(graph.inputs)
        ],
        "nodes": [_node(node, f"{path}.nodes[{index}]") for index, node in enumerate(graph.nodes)],
        "in_spec": _tree(graph.in_spec, f"{path}.in_spec", 0),
        "input_leaves": _leaves(graph.input_leaves, f"{path}.input_leaves"),
        "out_spec": _tree(graph.out_spec, f"{path}.out_spec", 0),
        "output_leaves": _leaves(graph.output_leaves, f"{path}.output_leaves"),
        "guards": [_guard(guard, f"{path}.guards[{i}]") for i, guard in enumerate(graph.guards)],
        "constants": {
            name: blob.entry(tensor, f"{path}.constants[{name!r}]")
            for name, tensor in _table(graph.constants, f"{path}.constants")
        },
        "subgraphs": {
            name: _graph(subgraph, f"{path}.subgraphs[{name!r}]", blob, depth + 1)
            for name, subgraph in _table(graph.subgraphs, f"{path}.subgraphs")
        },
    }


def _symbol(name: str, info: Any, path: str) -> dict[str, Any]:
    if not isinstance(info, SymbolInfo) or info.name != name:
        raise _fail(path, f"expected SymbolInfo named {name!r}, got {info!r}")
    optional = (info.upper, info.hint)
    return {
        "lower": _int(info.lower, f"{path}.lower", INT64_MIN, INT64_MAX),
        "upper": None
        if optional[0] is None
        else _int(optional[0], f"{path}.upper", INT64_MIN, INT64_MAX),
        "hint": None
        if optional[1] is None
        else _int(optional[1], f"{path}.hint", INT64_MIN, INT64_MAX),
    }


def _input(graph_input: GraphInput, path: str) -> dict[str, Any]:
    if not isinstance(graph_input, GraphInput) or not isinstance(graph_input.kind, InputKind):
        raise _fail(path, f"expected a GraphInput, got {graph_input!r}")
    target = graph_input.target
    return {
        **_value(graph_input.value, path),
        "kind": graph_input.kind.value,
        "target": None if target is None else _string(target, f"{path}.target"),
    }


def _value(value: Value, path: str) -> dict[str, Any]:
    if not isinstance(value, Value):
        raise _fail(path, f"expected a Value, got {type(value).__name__}")
    return {"name": _string(value.name, f"{path}.name"), "spec": _spec(value.spec, f"{path}.spec")}


def _spec(spec: Any, path: str) -> dict[str, Any]:
    if isinstance(spec, TensorSpec):
        if len(spec.shape) != len(spec.strides) or len(spec.shape) > MAX_NDIM:
            raise _fail(
                path,
                f"{len(spec.shape)} sizes and {len(spec.strides)} strides "
                f"(equal counts, at most {MAX_NDIM}, are required)",
            )
        return {
            "kind": "tensor",
            "dtype": encode_dtype(spec.dtype, f"{path}.dtype"),
            "shape": [_size(size, f"{path}.shape[{i}]") for i, size in enumerate(spec.shape)],
            "strides": [_size(size, f"{path}.strides[{i}]") for i, size in enumerate(spec.strides)],
            "storage_offset": _size(spec.storage_offset, f"{path}.storage_offset"),
            "device": encode_device(spec.device, f"{path}.device"),
            "requires_grad": _bool(spec.requires_grad, f"{path}.requires_grad"),
        }
    if isinstance(spec, ScalarSpec):
        if spec.type not in SCALAR_TYPES:
            raise _fail(path, f"scalar type {spec.type!r} is not one of {SCALAR_TYPES}")
        if spec.expr is not None and not isinstance(spec.expr, sympy.Basic):
            raise _fail(path, f"expected a sympy expression, got {type(spec.expr).__name__}")
        expr = None if spec.expr is None else encode_expr(spec.expr, f"{path}.expr")
        return {"kind": "scalar", "type": spec.type, "expr": expr}
    raise _fail(path, f"expected a TensorSpec or ScalarSpec, got {type(spec).__name__}")


def _size(size: Any, path: str) -> Any:
    if isinstance(size, sympy.Expr):
        return {"$sym": encode_expr(size, path)}
    return _int(size, path, 0, MAX_SIZE)


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise _fail(path, f"expected a bool, got {type(value).__name__}")
    return value


def _node(node: Node, path: str) -> dict[str, Any]:
    if not isinstance(node, Node) or type(node.args) is not list:
        raise _fail(path, f"expected a Node with a list of args, got {node!r}")
    return {
        "target": _string(node.target, f"{path}.target"),
        "args": [encode_arg(arg, f"{path}.args[{i}]") for i, arg in enumerate(node.args)],
        "kwargs": {
            key: encode_arg(arg, f"{path}.kwargs[{key!r}]")
            for key, arg in _table(node.kwargs, f"{path}.kwargs")
        },
        "outputs": [_output(out, f"{path}.outputs[{i}]") for i, out in enumerate(node.outputs)],
        "source": _source(node.source, f"{path}.source"),
    }


def _output(output: Any, path: str) -> Any:
    if output is None:
        return None
    if type(output) is list:
        return [_value(value, f"{path}[{i}]") for i, value in enumerate(output)]
    return _value(output, path)


def _source(source: SourceLocation | None, path: str) -> dict[str, Any] | None:
    if source is None:
        return None
    if not isinstance(source, SourceLocation):
        raise _fail(path, f"expected a SourceLocation, got {type(source).__name__}")
    return {
        "file": _string(source.file, f"{path}.file"),
        "line": _int(source.line, f"{path}.line", INT64_MIN, INT64_MAX),
        "function": _string(source.function, f"{path}.function"),
        "code": _string(source.code, f"{path}.code"),
    }


def _tree(spec: TreeSpec, path: str, depth: int) -> dict[str, Any]:
    if not isinstance(spec, TreeSpec):
        raise _fail(path, f"expected a TreeSpec, got {type(spec).__name__}")
    if depth > MAX_TREE_DEPTH:
        raise _fail(path, f"pytree nested deeper than {MAX_TREE_DEPTH}")
    if spec.kind == "leaf" and not spec.children and not spec.keys:
        return {"kind": "leaf"}
    if spec.kind not in ("tuple", "list", "dict") or (spec.kind != "dict" and spec.keys):
        raise _fail(path, f"malformed TreeSpec {spec}")
    children = [
        _tree(child, f"{path}.children[{i}]", depth + 1) for i, child in enumerate(spec.children)
    ]
    if spec.kind != "dict":
        return {"kind": spec.kind, "children": children}
    if len(spec.keys) != len(spec.children):
        raise _fail(path, f"{len(spec.keys)} dict keys for {len(spec.children)} children")
    keys = [_key(key, f"{path}.keys[{i}]") for i, key in enumerate(spec.keys)]
    return {"kind": "dict", "children": children, "keys": keys}


def _key(key: Any, path: str) -> Any:
    if type(key) is str:
        return key
    if type(key) is int:
        return encode_int(key, path)
    raise _fail(path, f"a dict key must be a str or an int, got {type(key).__name__}")


def _leaves(leaves: Any, path: str) -> list[Any]:
    if type(leaves) is not list:
        raise _fail(path, f"expected a list, got {type(leaves).__name__}")
    return [encode_arg(leaf, f"{path}[{i}]") for i, leaf in enumerate(leaves)]


def _guard(guard: ShapeGuard, path: str) -> dict[str, Any]:
    if not isinstance(guard, ShapeGuard) or not isinstance(guard.expr, sympy.Basic):
        raise _fail(path, f"expected a ShapeGuard over a sympy expression, got {guard!r}")
    return {
        "expr": encode_expr(guard.expr, f"{path}.expr"),
        "source": _source(guard.source, f"{path}.source"),
    }
