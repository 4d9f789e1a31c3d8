"""JSON document plus blob -> Graph (the reader half of the format).

Every field is read through a path-carrying `Field` in an order that lets each reference be
checked where it is met: symbols, constants and sub-graphs first, then inputs, then nodes (an
argument may only name a value defined before it), then signatures and guards.
"""

from __future__ import annotations

import keyword
from typing import Any

import sympy

from ember.prims.graph import Graph, GraphInput, InputKind, Node, Output, ShapeGuard, Value
from ember.prims.ops import is_known_op
from ember.prims.pytree import TreeSpec
from ember.prims.serialize.constants import BlobReader
from ember.prims.serialize.encode import SCALAR_TYPES
from ember.prims.serialize.limits import (
    INT64_MAX,
    INT64_MIN,
    MAX_NDIM,
    MAX_SIZE,
    MAX_SUBGRAPH_DEPTH,
    MAX_TREE_DEPTH,
)
from ember.prims.serialize.literals import decode_arg, decode_device, decode_dtype
from ember.prims.serialize.reader import Field, describe, quote
from ember.prims.serialize.symexpr import decode_expr
from ember.prims.source import SourceLocation
from ember.prims.specs import ScalarSpec, Spec, SymbolInfo, TensorSpec

GRAPH_KEYS = (
    "name", "meta", "symbols", "inputs", "nodes", "in_spec", "input_leaves", "out_spec",
    "output_leaves", "guards", "constants", "subgraphs",
)  # fmt: skip
_INPUT_KINDS = {kind.value: kind for kind in InputKind}


def decode_document(document: Any, blob: memoryview, *, lenient: bool = False) -> Graph:
    """The Graph of a parsed JSON document; `lenient` ignores unknown keys (newer minors)."""
    top = Field(document, lenient=lenient).object(("graph",))
    return _GraphDecoder(top["graph"], BlobReader(blob), depth=0).decode()


class _GraphDecoder:
    """Decodes one graph; it is also the scope its arguments' references resolve in."""

    def __init__(self, field: Field, blob: BlobReader, depth: int) -> None:
        self.field = field
        self.blob = blob
        self.depth = depth
        self.symbols: dict[str, SymbolInfo] = {}
        self.subgraphs: dict[str, Graph] = {}
        self.defined: dict[str, Value] = {}
        self.input_names: set[str] = set()
        self.placing_inputs = False  # while reading input_leaves, only inputs may be named

    # ---- scope -----------------------------------------------------------------------------

    def check_value(self, name: str, field: Field) -> None:
        if self.placing_inputs and name not in self.input_names:
            field.fail(f"{quote(name)} is not an input of the graph")
        if name not in self.defined:
            field.fail(f"{quote(name)} is used before it is defined (or never defined)")

    def check_subgraph(self, name: str, field: Field) -> None:
        if name not in self.subgraphs:
            field.fail(f"sub-graph {quote(name)} is not in the graph's sub-graph table")

    # ---- the graph -------------------------------------------------------------------------

    def decode(self) -> Graph:
        if self.depth > MAX_SUBGRAPH_DEPTH:
            self.field.fail(f"sub-graphs nested deeper than {MAX_SUBGRAPH_DEPTH}")
        members = self.field.object(GRAPH_KEYS)
        name = members["name"].string()
        meta = {key: item.string() for key, item in members["meta"].map()}
        for key, item in members["symbols"].map():
            self.symbols[key] = self._symbol(key, item)
        constants = {key: self.blob.constant(item) for key, item in members["constants"].map()}
        for key, item in members["subgraphs"].map():
            self.subgraphs[key] = _GraphDecoder(item, self.blob, self.depth + 1).decode()
        inputs = [self._input(item, constants) for item in members["inputs"].array()]
        self.input_names = set(self.defined)
        nodes = [self._node(item) for item in members["nodes"].array()]
        in_spec = _tree(members["in_spec"], 0)
        self.placing_inputs = True
        input_leaves = self._leaves(members["input_leaves"], in_spec)
        self.placing_inputs = False
        out_spec = _tree(members["out_spec"], 0)
        output_leaves = self._leaves(members["output_leaves"], out_spec)
        guards = [self._guard(item) for item in members["guards"].array()]
        return Graph(
            inputs=inputs,
            nodes=nodes,
            in_spec=in_spec,
            input_leaves=input_leaves,
            out_spec=out_spec,
            output_leaves=output_leaves,
            symbols=self.symbols,
            guards=guards,
            constants=constants,
            subgraphs=self.subgraphs,
            name=name,
            meta=meta,
        )

    def _symbol(self, name: str, field: Field) -> SymbolInfo:
        members = field.object(("lower", "upper", "hint"))
        return SymbolInfo(
            name,
            lower=members["lower"].integer(INT64_MIN, INT64_MAX),
            upper=members["upper"].optional_integer(INT64_MIN, INT64_MAX),
            hint=members["hint"].optional_integer(INT64_MIN, INT64_MAX),
        )

    def _input(self, field: Field, constants: dict[str, Any]) -> GraphInput:
        members = field.object(("name", "spec", "kind", "target"))
        value = self._define(members["name"], members["spec"])
        kind_name = members["kind"].string()
        if kind_name not in _INPUT_KINDS:
            members["kind"].fail(
                f"unknown input kind {quote(kind_name)}; expected {list(_INPUT_KINDS)}"
            )
        kind = _INPUT_KINDS[kind_name]
        target = members["target"].optional_string()
        if kind is not InputKind.USER and not target:
            members["target"].fail(f"a {kind_name} input names its constants-table entry")
        # Parameters and buffers may be bound by the caller; tensor literals never are.
        if kind is InputKind.CONSTANT and target not in constants:
            members["target"].fail(
                f"constant {quote(target)} is not in the graph's constants table"
            )
        return GraphInput(value, kind, target)

    def _define(self, name_field: Field, spec_field: Field) -> Value:
        name = name_field.string()
        if not name.isidentifier() or keyword.iskeyword(name):
            name_field.fail(f"value name {quote(name)} is not a Python identifier")
        if name in self.defined:
            name_field.fail(f"value {quote(name)} is defined twice")
        value = Value(name, self._spec(spec_field))
        self.defined[name] = value
        return value

    def _node(self, field: Field) -> Node:
        members = field.object(("target", "args", "kwargs", "outputs", "source"))
        target = members["target"].string()
        if not _is_known_op(target):
            members["target"].fail(f"unknown operator {quote(target)}")
        args = [decode_arg(item, self) for item in members["args"].array()]
        kwargs = {key: decode_arg(item, self) for key, item in members["kwargs"].map()}
        # Outputs are defined after the arguments are read: a node cannot use its own output.
        outputs = [self._output(item) for item in members["outputs"].array()]
        return Node(target, args, kwargs, outputs, _source(members["source"]))

    def _output(self, field: Field) -> Output:
        if field.value is None:
            return None
        if isinstance(field.value, list):
            return [self._value(item) for item in field.array()]
        return self._value(field)

    def _value(self, field: Field) -> Value:
        members = field.object(("name", "spec"))
        return self._define(members["name"], members["spec"])

    def _spec(self, field: Field) -> Spec:
        if not field.is_object():
            field.fail(f"expected a spec object, got {describe(field.value)}")
        kind = field.child(field.value.get("kind"), ".kind").string()
        if kind == "scalar":
            members = field.object(("kind", "type", "expr"))
            scalar_type = members["type"].string()
            if scalar_type not in SCALAR_TYPES:
                members["type"].fail(f"unknown scalar type {quote(scalar_type)}")
            expr_field = members["expr"]
            expr = None if expr_field.value is None else decode_expr(expr_field, self.symbols)
            return ScalarSpec(scalar_type, expr)
        if kind != "tensor":
            field.child(kind, ".kind").fail(f"unknown spec kind {quote(kind)}")
        members = field.object(
            ("kind", "dtype", "shape", "strides", "storage_offset", "device", "requires_grad")
        )
        shape = self._sizes(members["shape"])
        strides = self._sizes(members["strides"])
        if len(strides) != len(shape):
            members["strides"].fail(f"{len(strides)} strides for {len(shape)} dimensions")
        return TensorSpec(
            dtype=decode_dtype(members["dtype"]),
            shape=shape,
            strides=strides,
            device=decode_device(members["device"]),
            requires_grad=members["requires_grad"].boolean(),
            storage_offset=self._size(members["storage_offset"]),
        )

    def _sizes(self, field: Field) -> tuple[Any, ...]:
        items = field.array()
        if len(items) > MAX_NDIM:
            field.fail(f"{len(items)} dimensions; at most {MAX_NDIM} are allowed")
        return tuple(self._size(item) for item in items)

    def _size(self, field: Field) -> Any:
        if field.is_integer():
            return field.integer(0, MAX_SIZE)
        value = field.value
        if not (isinstance(value, dict) and len(value) == 1 and "$sym" in value):
            field.fail(
                f'expected a size: an integer or {{"$sym": expression}}, got {describe(value)}'
            )
        expr = decode_expr(field.child(value["$sym"], ".$sym"), self.symbols)
        if not isinstance(expr, sympy.Expr):
            field.fail(f"a size must be a number expression, got {expr}")
        return expr

    def _leaves(self, field: Field, spec: TreeSpec) -> list[Any]:
        items = field.array()
        if len(items) != spec.num_leaves:
            field.fail(f"{len(items)} leaves, but the tree spec has {spec.num_leaves}")
        return [decode_arg(item, self) for item in items]

    def _guard(self, field: Field) -> ShapeGuard:
        members = field.object(("expr", "source"))
        return ShapeGuard(decode_expr(members["expr"], self.symbols), _source(members["source"]))


def _is_known_op(target: str) -> bool:
    try:
        return is_known_op(target)
    except Exception:  # an odd name must read as unknown, whatever torch.ops raises for it
        return False


def _source(field: Field) -> SourceLocation | None:
    if field.value is None:
        return None
    members = field.object(("file", "line", "function", "code"))
    return SourceLocation(
        file=members["file"].string(),
        line=members["line"].integer(INT64_MIN, INT64_MAX),
        function=members["function"].string(),
        code=members["code"].string(),
    )


def _tree(field: Field, depth: int) -> TreeSpec:
    if depth > MAX_TREE_DEPTH:
        field.fail(f"pytree nested deeper than {MAX_TREE_DEPTH}")
    if not field.is_object():
        field.fail(f"expected a tree spec object, got {describe(field.value)}")
    kind = field.child(field.value.get("kind"), ".kind").string()
    if kind == "leaf":
        field.object(("kind",))
        return TreeSpec("leaf")
    if kind not in ("tuple", "list", "dict"):
        field.child(kind, ".kind").fail(f"unknown tree kind {quote(kind)}")
    if kind != "dict":
        members = field.object(("kind", "children"))
        return TreeSpec(kind, tuple(_tree(item, depth + 1) for item in members["children"].array()))
    members = field.object(("kind", "children", "keys"))
    children = tuple(_tree(item, depth + 1) for item in members["children"].array())
    keys = tuple(
        key.value if isinstance(key.value, str) else key.integer()
        for key in members["keys"].array(length=len(children))
    )
    if len(set(keys)) != len(keys):
        members["keys"].fail("dict keys repeat")
    return TreeSpec(kind, children, keys)
