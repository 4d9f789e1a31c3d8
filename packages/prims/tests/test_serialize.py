"""Serialization: exact round trips of every Graph field and literal, and a clear
GraphFormatError (with the field path) for each kind of malformed input."""

from __future__ import annotations

import copy
import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest
import sympy
import torch

from ember.prims.errors import GraphFormatError
from ember.prims.graph import (
    Graph,
    GraphInput,
    InputKind,
    Node,
    Ref,
    ShapeGuard,
    SubgraphRef,
    Value,
)
from ember.prims.pytree import TreeSpec
from ember.prims.serialize import FORMAT_VERSION, MAGIC, dump_document, dumps, load, loads, save
from ember.prims.serialize.container import frame
from ember.prims.serialize.encode import encode_document
from ember.prims.source import SourceLocation
from ember.prims.specs import DTYPES, ScalarSpec, SymbolInfo, TensorSpec, symbol

CPU = torch.device("cpu")
S0, S1 = symbol("s0"), symbol("s1")
LEAF = TreeSpec("leaf")


def _spec(*shape: Any, dtype: torch.dtype = torch.float32, grad: bool = False) -> TensorSpec:
    strides: list[Any] = []
    step: Any = 1
    for size in reversed(shape):
        strides.insert(0, step)
        step = step * size
    return TensorSpec(dtype, tuple(shape), tuple(strides), CPU, grad)


def _tuple_of(count: int) -> TreeSpec:
    return TreeSpec("tuple", (LEAF,) * count)


def _here(line: int) -> SourceLocation:
    return SourceLocation("/home/user/model.py", line, "forward", "x = self.l(x).relu()")


def mlp_graph() -> Graph:
    """addmm + relu over a symbolic batch, with parameters, symbols, guards and sources."""
    x = Value("x", _spec(S0, 4))
    w = Value("w", _spec(8, 4, grad=True))
    b = Value("b", _spec(8, grad=True))
    wt = Value("wt", TensorSpec(torch.float32, (4, 8), (1, 4), CPU, True))
    y = Value("y", _spec(S0, 8, grad=True))
    r = Value("r", _spec(S0, 8, grad=True))
    size = Value("size", ScalarSpec("int", S0 * 8))
    return Graph(
        inputs=[
            GraphInput(x),
            GraphInput(w, InputKind.PARAMETER, "l.weight"),
            GraphInput(b, InputKind.PARAMETER, "l.bias"),
        ],
        nodes=[
            Node("aten::t.default", [Ref("w")], {}, [wt], _here(12)),
            Node(
                "aten::addmm.default",
                [Ref("b"), Ref("x"), Ref("wt")],
                {"beta": 1.0, "alpha": 1},
                [y],
                _here(12),
            ),
            Node("aten::relu.default", [Ref("y")], {}, [r], _here(13)),
            Node("aten::sym_numel.default", [Ref("r")], {}, [size], None),
        ],
        in_spec=TreeSpec("tuple", (TreeSpec("dict", (LEAF,), ("input",)),)),
        input_leaves=[Ref("x")],
        out_spec=TreeSpec("tuple", (LEAF, LEAF)),
        output_leaves=[Ref("r"), Ref("size")],
        symbols={"s0": SymbolInfo("s0", 2, None, 8)},
        guards=[ShapeGuard(sympy.Gt(S0, 1), _here(11)), ShapeGuard(sympy.Ne(S0 % 2, 1))],
        constants={
            "l.weight": torch.nn.Parameter(torch.randn(8, 4)),
            "l.bias": torch.nn.Parameter(torch.randn(8)),
        },
        name="mlp",
        meta={"pass": "trace", "time_ms": "1.5"},
    )


def batch_norm_graph() -> Graph:
    """native_batch_norm (three outputs, one unused) and split (a Tensor[] output)."""
    x = Value("x", _spec(4, 3, 5, 5))
    state = [Value(name, _spec(3)) for name in ("weight", "bias", "mean", "var")]
    out = Value("out", _spec(4, 3, 5, 5))
    save_mean, save_invstd = Value("save_mean", _spec(3)), Value("save_invstd", _spec(3))
    pieces = [
        Value("split", TensorSpec(torch.float32, (2, 3, 5, 5), (75, 25, 5, 1), CPU)),
        Value("split_1", TensorSpec(torch.float32, (2, 3, 5, 5), (75, 25, 5, 1), CPU, False, 150)),
    ]
    kinds = [InputKind.PARAMETER, InputKind.PARAMETER, InputKind.BUFFER, InputKind.BUFFER]
    return Graph(
        inputs=[GraphInput(x)] + [GraphInput(v, k, f"bn.{v.name}") for v, k in zip(state, kinds)],
        nodes=[
            Node(
                "aten::native_batch_norm.default",
                [Ref("x"), Ref("weight"), Ref("bias"), Ref("mean"), Ref("var"), True, 0.1, 1e-5],
                {},
                [out, save_mean, save_invstd],
            ),
            Node("aten::split.Tensor", [Ref("out"), 2], {"dim": 0}, [pieces]),
            Node(
                "aten::cat.default",
                [[Ref("split_1"), Ref("split")]],
                {},
                [Value("cat", _spec(4, 3, 5, 5))],
            ),
        ],
        in_spec=_tuple_of(1),
        input_leaves=[Ref("x")],
        out_spec=TreeSpec("list", (LEAF, LEAF)),
        output_leaves=[Ref("cat"), Ref("save_mean")],
        constants={f"bn.{v.name}": torch.rand(3) for v in state},
    )


def control_flow_graph() -> Graph:
    """Sub-graphs (nested two deep) referred to by SubgraphRef, and a CONSTANT input."""
    inner = Graph(
        inputs=[GraphInput(Value("a", _spec(3)))],
        nodes=[Node("aten::neg.default", [Ref("a")], {}, [Value("n", _spec(3))])],
        in_spec=_tuple_of(1),
        input_leaves=[Ref("a")],
        output_leaves=[Ref("n")],
        name="inner",
    )
    body = Graph(
        inputs=[GraphInput(Value("a", _spec(3)))],
        nodes=[Node("aten::sin.default", [Ref("a")], {}, [Value("s", _spec(3))])],
        in_spec=_tuple_of(1),
        input_leaves=[Ref("a")],
        out_spec=TreeSpec("tuple", (LEAF, LEAF)),
        output_leaves=[Ref("s"), SubgraphRef("inner")],
        subgraphs={"inner": inner},
        name="body",
    )
    c = Value("c", _spec(3))
    return Graph(
        inputs=[
            GraphInput(Value("x", _spec(3))),
            GraphInput(c, InputKind.CONSTANT, "_tensor_constant0"),
        ],
        nodes=[
            Node("aten::add.Tensor", [Ref("x"), Ref("c")], {"alpha": 2}, [Value("add", _spec(3))])
        ],
        in_spec=_tuple_of(1),
        input_leaves=[Ref("x")],
        out_spec=TreeSpec("tuple", (LEAF, LEAF)),
        output_leaves=[Ref("add"), SubgraphRef("body")],
        constants={"_tensor_constant0": torch.tensor([1.0, -0.0, float("nan")])},
        subgraphs={"body": body},
    )


def literal_graph(leaves: list[Any], symbols: tuple[str, ...] = ("s0", "s1")) -> Graph:
    """A graph that returns `leaves` as literal outputs."""
    return Graph(
        out_spec=_tuple_of(len(leaves)),
        output_leaves=list(leaves),
        symbols={name: SymbolInfo(name, 0, 1024, 16) for name in symbols},
    )


def _same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down; floats compared bit for bit (nan, -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, complex):
        return _same(a.real, b.real) and _same(a.imag, b.imag)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, sympy.Basic):
        return sympy.srepr(a) == sympy.srepr(b) and a == b
    return bool(a == b)


def _roundtrip(graph: Graph) -> Graph:
    data = dumps(graph)
    loaded = loads(data)
    assert loaded == graph
    assert dumps(loaded) == data  # deterministic, and nothing was lost
    return loaded


# ---- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("build", [mlp_graph, batch_norm_graph, control_flow_graph])
def test_graphs_round_trip(build: Any) -> None:
    graph = build()
    loaded = _roundtrip(graph)
    for before, after in zip(graph.nodes, loaded.nodes):
        assert _same(before.args, after.args) and before.source == after.source
    assert [gi.kind for gi in loaded.inputs] == [gi.kind for gi in graph.inputs]


def test_multi_output_nodes_keep_schema_alignment() -> None:
    loaded = _roundtrip(batch_norm_graph())
    outputs = loaded.nodes[1].outputs
    assert isinstance(outputs[0], list) and [v.name for v in outputs[0]] == ["split", "split_1"]
    assert len(loaded.nodes[0].outputs) == 3


def test_constants_round_trip_bits_and_flags() -> None:
    loaded = _roundtrip(mlp_graph())
    weight = loaded.constants["l.weight"]
    assert weight.requires_grad and weight.is_contiguous() and type(weight) is torch.Tensor
    constant = _roundtrip(control_flow_graph()).constants["_tensor_constant0"]
    assert math.copysign(1.0, float(constant[1])) == -1.0 and math.isnan(float(constant[2]))


def _sample(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    base = torch.randn(shape, dtype=torch.complex64 if dtype.is_complex else torch.float32) * 50
    if dtype == torch.bool:
        return base.real > 0
    return base.to(dtype)


_DATA_DTYPES = [d for n, d in DTYPES.items() if not n.startswith(("qint", "quint"))]


@pytest.mark.parametrize("dtype", _DATA_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2, 3)], ids=str)
def test_constant_dtypes_and_shapes(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    tensor = _sample(dtype, shape)
    grad = (dtype.is_floating_point or dtype.is_complex) and shape == (2, 3)
    graph = Graph(
        inputs=[GraphInput(Value("c", TensorSpec.of(tensor)), InputKind.CONSTANT, "c")],
        output_leaves=[Ref("c")],
        constants={"c": tensor.requires_grad_(grad)},
    )
    data = dumps(graph)
    loaded_graph = loads(data)
    assert dumps(loaded_graph) == data
    if dtype not in _NO_TORCH_EQUAL:  # Graph.__eq__ uses torch.equal, missing for these
        assert loaded_graph == graph
    loaded = loaded_graph.constants["c"]
    assert loaded.dtype == dtype and loaded.shape == tensor.shape and loaded.requires_grad == grad
    assert torch.equal(_bits(loaded), _bits(tensor))


_NO_TORCH_EQUAL = {torch.complex32} | {d for n, d in DTYPES.items() if n.startswith("float8")}


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def test_non_contiguous_constants_are_saved_contiguous() -> None:
    tensor = torch.arange(12.0).reshape(3, 4).t()[1:]
    graph = Graph(constants={"t": tensor}, output_leaves=[None])
    loaded = loads(dumps(graph)).constants["t"]
    assert torch.equal(loaded, tensor) and loaded.is_contiguous()


_LITERALS: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    2**53,
    2**53 + 1,
    -(2**63),
    2**64 + 7,
    -(2**200),
    0.0,
    -0.0,
    1.5,
    1e-310,
    1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    complex(1.5, -2.0),
    complex(float("nan"), float("inf")),
    "",
    "text",
    "ünï\u0000\ud800",
    [],
    [1, [2, [3.0, None]]],
    (1, "a"),
    (),
    [Ref("x"), None, Ref("x")],
    ([1, (2,)],),
    torch.float32,
    torch.bfloat16,
    torch.bool,
    torch.complex32,
    torch.device("cpu"),
    torch.device("cuda", 0),
    torch.device("meta"),
    torch.device("cuda", 127),
    torch.strided,
    torch.sparse_coo,
    torch.jagged,
    torch.contiguous_format,
    torch.channels_last,
    torch.preserve_format,
    S0,
    S0 // 2,
    sympy.ceiling(S0 / 3),
    S0 % 4,
    sympy.Max(S0, S1),
    sympy.Min(S0, 2, S1),
    S0**2 - 3 * S1 + 1,
    1 / (S0 + 1),
    sympy.Rational(-7, 3),
    sympy.Integer(2**100),
    sympy.Float(0.1),
    sympy.Float("0.1", 60),
    sympy.Float(-2.5) * S0,
    sympy.Float(0),
    sympy.oo,
    -sympy.oo,
    sympy.nan,
    sympy.true,
    sympy.false,
    sympy.Eq(S0, 2),
    sympy.Ne(S0, S1),
    sympy.Lt(S0, 4),
    sympy.Le(S0, S1),
    sympy.Gt(S0, 0),
    sympy.Ge(S1, 1),
    sympy.And(S0 > 1, S1 < 5),
    sympy.Or(sympy.Eq(S0, 1), sympy.Eq(S1, 1)),
    sympy.Not(sympy.Eq(S0, 1), evaluate=False),
    sympy.Eq(sympy.Eq(S0, 1), sympy.true),
    sympy.Add(S0, S0, evaluate=False),
    sympy.Pow(10, 100, evaluate=False),
    sympy.sqrt(S0),
    sympy.log(S0, 2),
    sympy.sin(S0) + sympy.cos(S0) * sympy.tan(S1),
    sympy.asin(S0) - sympy.acos(S1) / sympy.atan(S0),
    sympy.sinh(S0) + sympy.cosh(S0),
    sympy.tanh(sympy.Float(0.5) * S0),
    sympy.exp(S1),
    sympy.asin(1),
    sympy.E * S0,
]


@pytest.mark.parametrize("literal", _LITERALS, ids=repr)
def test_literal_round_trip(literal: Any) -> None:
    graph = literal_graph([literal])
    graph.inputs = [GraphInput(Value("x", _spec(3)))]
    graph.in_spec, graph.input_leaves = _tuple_of(1), [Ref("x")]
    loaded = loads(dumps(graph))
    assert _same(loaded.output_leaves[0], literal)


def test_literals_in_node_arguments_keep_types() -> None:
    graph = batch_norm_graph()
    loaded = loads(dumps(graph))
    assert _same(loaded.nodes[0].args, graph.nodes[0].args)
    assert type(loaded.nodes[1].kwargs["dim"]) is int


def test_symbols_are_ember_symbols() -> None:
    loaded = _roundtrip(mlp_graph())
    spec = loaded.inputs[0].value.spec
    assert isinstance(spec, TensorSpec) and sympy.srepr(spec.shape[0]) == sympy.srepr(S0)
    assert loaded.symbols["s0"] == SymbolInfo("s0", 2, None, 8)


def test_traced_model_round_trips() -> None:
    from ember.prims import trace

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    _roundtrip(trace(model, torch.randn(2, 3, 8, 8)))


def test_save_and_load(tmp_path: Path) -> None:
    path = tmp_path / "graph.ember"
    path.write_bytes(b"old")
    graph = mlp_graph()
    save(graph, path)
    assert load(path) == graph
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.ember"]  # no temporary left
    assert load(str(path)) == loads(path.read_bytes())


def test_container_layout() -> None:
    data = dumps(mlp_graph())
    assert data[:8] == MAGIC and struct.unpack_from("<HH", data, 8) == FORMAT_VERSION
    (length,) = struct.unpack_from("<Q", data, 12)
    assert (20 + length + 8) % 64 == 0  # the blob starts aligned
    assert json.loads(data[20 : 20 + length])["graph"]["name"] == "mlp"


def test_encoder_names_what_it_cannot_serialize() -> None:
    graph = literal_graph([object()])
    with pytest.raises(GraphFormatError, match=r"cannot serialize graph.output_leaves\[0\]"):
        dumps(graph)
    graph = literal_graph([sympy.Symbol("k")])
    with pytest.raises(GraphFormatError, match="assumptions differ"):
        dumps(graph)
    graph = literal_graph([sympy.Abs(S0 - 3)])
    with pytest.raises(GraphFormatError, match="Abs"):
        dumps(graph)


# ---- malformed input ---------------------------------------------------------------------------


def _parts(graph: Graph | None = None) -> tuple[dict[str, Any], bytes]:
    return encode_document(graph or batch_norm_graph())


def _fails(document: Any, blob: bytes, pattern: str) -> str:
    with pytest.raises(GraphFormatError, match=pattern) as info:
        loads(frame(document, blob))
    assert "internal error" not in str(info.value)
    return str(info.value)


def _header(major: int, minor: int, document: bytes, blob: bytes = b"") -> bytes:
    return (
        struct.pack("<8sHHQ", MAGIC, major, minor, len(document))
        + document
        + struct.pack("<Q", len(blob))
        + blob
    )


def test_truncated_bytes() -> None:
    data = dumps(mlp_graph())
    for cut in (0, 5, 12, 19, 25, len(data) - 300, len(data) - 1):
        with pytest.raises(GraphFormatError, match="truncated"):
            loads(data[:cut])


def test_bad_magic_and_trailing_bytes() -> None:
    data = dumps(mlp_graph())
    with pytest.raises(GraphFormatError, match="magic"):
        loads(b"PK\x03\x04" + data[4:])
    with pytest.raises(GraphFormatError, match="3 unexpected bytes after the blob"):
        loads(data + b"abc")
    with pytest.raises(GraphFormatError, match="expected bytes"):
        loads("text")  # type: ignore[arg-type]


def test_version_rules() -> None:
    graph = batch_norm_graph()
    document, blob = encode_document(graph)
    text = json.dumps(document).encode()
    with pytest.raises(
        GraphFormatError, match=r"unsupported format version 2\.0.*reads version 1\.x"
    ):
        loads(_header(2, 0, text))
    extended = copy.deepcopy(document)
    extended["graph"]["nodes"][0]["future_field"] = {"anything": [1]}
    newer = json.dumps(extended).encode()
    assert loads(_header(1, FORMAT_VERSION[1] + 1, newer, blob)) == graph
    with pytest.raises(GraphFormatError, match=r"graph.nodes\[0\]: unknown key 'future_field'"):
        loads(_header(1, FORMAT_VERSION[1], newer, blob))


def test_invalid_utf8_and_json() -> None:
    with pytest.raises(GraphFormatError, match="not valid UTF-8 at byte 1"):
        loads(_header(1, 0, b'{\xff"graph": 1}'))
    with pytest.raises(GraphFormatError, match="JSON document is invalid"):
        loads(_header(1, 0, b'{"graph": [1, 2'))
    with pytest.raises(GraphFormatError, match="NaN is not JSON"):
        loads(_header(1, 0, b'{"graph": NaN}'))
    with pytest.raises(GraphFormatError, match="appears twice"):
        loads(_header(1, 0, b'{"graph": 1, "graph": 2}'))
    with pytest.raises(GraphFormatError, match="JSON document is invalid"):
        loads(_header(1, 0, b'{"graph": ' + b"9" * 5000 + b"}"))
    with pytest.raises(GraphFormatError, match="nested too deeply"):
        loads(_header(1, 0, b"[" * 100_000 + b"]" * 100_000))
    with pytest.raises(GraphFormatError, match=r"^document: expected an object"):
        loads(_header(1, 0, b"[]"))


@pytest.mark.parametrize(
    ("where", "replacement", "pattern"),
    [
        (("name",), 5, r"graph.name: expected a string, got an integer"),
        (("nodes", 0, "args"), "x", r"graph.nodes\[0\].args: expected an array"),
        (
            ("nodes", 0, "args", 5),
            [1, {"a": 1, "b": 2}],
            r"graph.nodes\[0\].args\[5\]\[1\]: expected a one-key",
        ),
        (("nodes", 0, "args", 5), {"$bogus": 1}, r"unknown literal tag '\$bogus'"),
        (("nodes", 0, "kwargs"), [], r"graph.nodes\[0\].kwargs: expected an object"),
        (
            ("nodes", 1, "outputs", 0, 1, "spec", "shape", 0),
            "2",
            r"outputs\[0\]\[1\].spec.shape\[0\]: expected a size",
        ),
        (
            ("inputs", 0, "spec", "requires_grad"),
            0,
            r"graph.inputs\[0\].spec.requires_grad: expected a boolean",
        ),
        (("inputs", 0, "kind"), "weight", r"unknown input kind 'weight'"),
        (("inputs", 0, "spec", "kind"), "sparse", r"unknown spec kind 'sparse'"),
        (("inputs", 0, "spec", "strides"), [1], r"1 strides for 4 dimensions"),
        (("in_spec", "kind"), "set", r"graph.in_spec.kind: unknown tree kind 'set'"),
        (
            ("out_spec",),
            {"kind": "leaf"},
            r"graph.output_leaves: 2 leaves, but the tree spec has 1",
        ),
        (("meta",), {"a": 1}, r"graph.meta\['a'\]: expected a string"),
        (
            ("nodes", 0, "source"),
            {"file": "f", "line": "1", "function": "g", "code": ""},
            r"source.line: expected an integer",
        ),
        (("nodes", 0), {"target": "aten::relu.default"}, r"graph.nodes\[0\]: missing key 'args'"),
    ],
)
def test_wrong_types_name_their_path(
    where: tuple[Any, ...], replacement: Any, pattern: str
) -> None:
    document, blob = _parts()
    _set(document["graph"], where, replacement)
    _fails(document, blob, pattern)


def _set(tree: Any, where: tuple[Any, ...], replacement: Any) -> None:
    for step in where[:-1]:
        tree = tree[step]
    tree[where[-1]] = replacement


def test_non_finite_json_numbers_are_rejected() -> None:
    document, blob = _parts()
    document["graph"]["nodes"][0]["args"][6] = "HUGE"
    text = json.dumps(document).replace('"HUGE"', "1e400").encode()
    with pytest.raises(GraphFormatError, match=r"graph.nodes\[0\].args\[6\]: a non-finite float"):
        loads(_header(1, 0, text, blob))


def test_dangling_forward_and_self_references() -> None:
    document, blob = _parts()
    nodes = document["graph"]["nodes"]
    nodes[0]["args"][0] = {"$ref": "ghost"}
    _fails(
        document, blob, r"graph.nodes\[0\].args\[0\].\$ref: 'ghost' is used before it is defined"
    )
    document, blob = _parts()
    document["graph"]["nodes"].reverse()  # cat uses split's outputs before split runs
    _fails(document, blob, r"graph.nodes\[0\].args\[0\]\[0\].\$ref: 'split_1' is used before")
    document, blob = _parts()
    document["graph"]["nodes"][2]["args"][0][0] = {"$ref": "cat"}
    _fails(document, blob, r"'cat' is used before it is defined")
    document, blob = _parts()
    document["graph"]["output_leaves"][0] = {"$ref": "nothing"}
    _fails(document, blob, r"graph.output_leaves\[0\].\$ref: 'nothing'")
    document, blob = _parts()
    document["graph"]["input_leaves"][0] = {"$ref": "cat"}
    _fails(document, blob, r"graph.input_leaves\[0\].\$ref: 'cat' is not an input")


def test_duplicate_and_invalid_value_names() -> None:
    document, blob = _parts()
    document["graph"]["nodes"][1]["outputs"][0][1]["name"] = "split"
    _fails(
        document, blob, r"graph.nodes\[1\].outputs\[0\]\[1\].name: value 'split' is defined twice"
    )
    document, blob = _parts()
    document["graph"]["inputs"][1]["name"] = "x"
    _fails(document, blob, r"graph.inputs\[1\].name: value 'x' is defined twice")
    document, blob = _parts()
    document["graph"]["inputs"][0]["name"] = "import os"
    _fails(document, blob, r"'import os' is not a Python identifier")


def test_unknown_operator() -> None:
    for target in ("aten::definitely_not_an_op.default", "os::system", "aten::relu.nope", "relu"):
        document, blob = _parts()
        document["graph"]["nodes"][0]["target"] = target
        _fails(document, blob, r"graph.nodes\[0\].target: unknown operator")


@pytest.mark.parametrize(
    ("field", "value", "pattern"),
    [
        ("dtype", "float33", r"graph.inputs\[0\].spec.dtype: unknown dtype 'float33'"),
        ("device", "tpu:0", r"spec.device: unknown device 'tpu:0'"),
        ("device", "cuda:128", r"unknown device 'cuda:128'|device index 128"),
        ("device", "cuda:-1", r"unknown device"),
        ("device", "cuda:0:0", r"unknown device"),
    ],
)
def test_unknown_dtype_and_device(field: str, value: str, pattern: str) -> None:
    document, blob = _parts()
    document["graph"]["inputs"][0]["spec"][field] = value
    _fails(document, blob, pattern)


def test_unknown_layout_and_memory_format() -> None:
    document, blob = _parts()
    document["graph"]["nodes"][0]["args"][5] = {"$layout": "diagonal"}
    _fails(document, blob, r"args\[5\].\$layout: unknown layout 'diagonal'")
    document["graph"]["nodes"][0]["args"][5] = {"$memory_format": "channels_first"}
    _fails(document, blob, r"unknown memory format 'channels_first'")


def test_constant_byte_count_must_match_dtype_and_shape() -> None:
    document, blob = _parts()
    document["graph"]["constants"]["bn.weight"]["nbytes"] = 8
    _fails(
        document,
        blob,
        r"constants\['bn.weight'\].nbytes: 8 bytes, but torch.float32 of shape \[3\] takes 12",
    )
    document, blob = _parts()
    document["graph"]["constants"]["bn.weight"]["shape"] = [4]
    _fails(document, blob, "takes 16 bytes")


def test_constant_offsets_beyond_the_blob() -> None:
    document, blob = _parts()
    document["graph"]["constants"]["bn.var"]["offset"] = len(blob) - 4
    _fails(document, blob, r"constants\['bn.var'\]: data at bytes .* lies beyond the blob")
    document, blob = _parts()
    document["graph"]["constants"]["bn.weight"]["offset"] = -1
    _fails(document, blob, r"offset: integer -1 is below the least allowed value 0")
    document, blob = _parts()
    for name in ("bn.bias", "bn.mean", "bn.var"):  # all four claim the same 12 bytes
        document["graph"]["constants"][name]["offset"] = 0
    document["graph"]["constants"]["bn.big"] = {
        "dtype": "float32",
        "shape": [len(blob) // 4],
        "requires_grad": False,
        "offset": 0,
        "nbytes": len(blob) // 4 * 4,
    }
    _fails(document, blob, "claim more bytes than the blob holds")


def test_bool_constants_hold_only_zero_and_one() -> None:
    graph = Graph(constants={"mask": torch.tensor([True, False, True])})
    document, blob = encode_document(graph)
    _fails(document, blob[:1] + b"\x02" + blob[2:], r"graph.constants\['mask'\]: a bool constant")


def test_loads_takes_any_bytes_like_object() -> None:
    graph = mlp_graph()
    data = dumps(graph)
    assert loads(bytearray(data)) == graph == loads(memoryview(data))
    assert loads(memoryview(b"xx" + data + b"yy")[2:-2]) == graph


def test_constant_flags_and_dtypes() -> None:
    document, blob = _parts()
    document["graph"]["constants"]["bn.weight"].update(dtype="int32", requires_grad=True)
    _fails(document, blob, "cannot require gradients")
    document["graph"]["constants"]["bn.weight"].update(dtype="qint8", requires_grad=False)
    _fails(document, blob, "qint8 constants are not supported")


@pytest.mark.parametrize(
    ("size", "pattern"),
    [
        (-1, "below the least allowed value 0"),
        (2**62 + 1, "above the greatest allowed value"),
        ({"$int": "9" * 81}, "at most 80 digits"),
        ({"$int": "1e5"}, "expected a decimal integer"),
        ({"$int": str(2**260)}, "does not fit in 256 bits"),
        (True, "expected a size"),
    ],
)
def test_absurd_sizes(size: Any, pattern: str) -> None:
    document, blob = _parts()
    document["graph"]["inputs"][0]["spec"]["shape"][0] = size
    _fails(document, blob, r"graph.inputs\[0\].spec.shape\[0\]")
    _fails(document, blob, pattern)


def test_absurd_constant_shapes_allocate_nothing() -> None:
    document, blob = _parts()
    document["graph"]["constants"]["huge"] = {
        "dtype": "float64",
        "shape": [2**62, 2**62],
        "requires_grad": False,
        "offset": 0,
        "nbytes": 2**62,
    }
    _fails(document, blob, r"constants\['huge'\].nbytes: .* takes")
    document["graph"]["constants"]["huge"].update(shape=[0, 2**62, 2**62], nbytes=0)
    _fails(document, blob, r"constants\['huge'\].shape: torch cannot make")
    document["graph"]["constants"]["huge"].update(shape=[2] * 65, nbytes=8 * 2**65)
    _fails(document, blob, "65 dimensions")


def _nest(depth: int, leaf: Any, wrap: Any) -> Any:
    for _ in range(depth):
        leaf = wrap(leaf)
    return leaf


def test_deep_nesting_is_bounded() -> None:
    document, blob = _parts()
    document["graph"]["nodes"][0]["args"][5] = _nest(40, 1, lambda x: [x])
    _fails(document, blob, r"graph.nodes\[0\].args\[5\](\[0\])+: argument nested deeper than 32")
    document["graph"]["nodes"][0]["args"][5] = _nest(40, 1, lambda x: {"$tuple": [x]})
    _fails(document, blob, "argument nested deeper than 32")
    document, blob = _parts(mlp_graph())
    document["graph"]["guards"][0]["expr"] = _nest(
        200, "s0", lambda x: {"op": "floor", "args": [x]}
    )
    _fails(
        document, blob, r"graph.guards\[0\].expr(.args\[0\])+: expression nested deeper than 128"
    )
    document, blob = _parts(mlp_graph())
    document["graph"]["out_spec"] = _nest(
        100, {"kind": "leaf"}, lambda x: {"kind": "list", "children": [x]}
    )
    _fails(document, blob, "pytree nested deeper than 64")
    graph = Graph()
    for _ in range(20):
        graph = Graph(subgraphs={"g": graph}, output_leaves=[SubgraphRef("g")])
    with pytest.raises(
        GraphFormatError, match=r"cannot serialize .*sub-graphs nested deeper than 16"
    ):
        dumps(graph)
    document, blob = _parts(Graph())
    inner = base = document["graph"]
    for _ in range(20):
        inner = {**base, "subgraphs": {"g": inner}}
    _fails({"graph": inner}, blob, r"(subgraphs\['g'\]\.){16}.*sub-graphs nested deeper than 16")


def test_missing_constant_of_a_state_input() -> None:
    document, blob = _parts(control_flow_graph())
    del document["graph"]["constants"]["_tensor_constant0"]
    _fails(document, blob, r"graph.inputs\[1\].target: constant '_tensor_constant0' is not in")
    document, blob = _parts()
    document["graph"]["inputs"][1]["target"] = None
    _fails(document, blob, r"graph.inputs\[1\].target: a parameter input names its constants")


def test_missing_subgraph() -> None:
    document, blob = _parts(control_flow_graph())
    del document["graph"]["subgraphs"]["body"]["subgraphs"]["inner"]
    _fails(
        document,
        blob,
        r"graph.subgraphs\['body'\].output_leaves\[1\].\$subgraph: sub-graph 'inner' is not",
    )


@pytest.mark.parametrize(
    ("expr", "pattern"),
    [
        ("s9", "symbol 's9' is not declared"),
        ({"op": "Add", "args": ["s0"]}, "Add takes at least 2 operands, got 1"),
        ({"op": "Pow", "args": ["s0", 2, 3]}, "Pow takes 2 operands, got 3"),
        ({"op": "Max", "args": list(range(1025))}, "1025 operands; at most 1024"),
        ({"op": "And", "args": ["s0", 1]}, r"args\[1\]: an operand of And must be a boolean"),
        ({"op": "Add", "args": [True, 1]}, "an operand of Add must be a number expression"),
        ({"op": "Rational", "p": 2, "q": 4}, "not in lowest terms"),
        ({"op": "Rational", "p": 1, "q": 0}, "below the least allowed value 2"),
        ({"op": "Float", "mantissa": "0x2", "exponent": 0, "precision": 53}, "odd"),
        ({"op": "Float", "mantissa": "0x1", "exponent": 2**40, "precision": 53}, "above"),
        ({"op": "sympify", "args": ["__import__('os')"]}, "unknown expression operator 'sympify'"),
        ("__import__('os').system('x')", "is not declared"),
        (1.5, "expected an expression"),
        ({"op": "Infinity", "args": []}, "unknown key 'args'"),
    ],
)
def test_malformed_expressions(expr: Any, pattern: str) -> None:
    document, blob = _parts(mlp_graph())
    document["graph"]["guards"][1]["expr"] = expr
    message = _fails(document, blob, pattern)
    assert message.startswith("graph.guards[1].expr")


def test_sizes_must_be_number_expressions() -> None:
    document, blob = _parts(mlp_graph())
    document["graph"]["inputs"][0]["spec"]["shape"][0] = {"$sym": {"op": "Gt", "args": ["s0", 1]}}
    _fails(document, blob, r"graph.inputs\[0\].spec.shape\[0\]: a size must be a number expression")


def test_verifier_failures_become_format_errors() -> None:
    document, blob = _parts()
    document["graph"]["nodes"][0]["outputs"].pop()  # native_batch_norm returns three
    _fails(document, blob, "does not verify.*2 outputs, the schema returns 3")


def test_schema_validates_dumped_documents() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    root = Path(__file__).resolve().parents[3]
    schema = json.loads((root / "docs" / "graph-format.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    graphs = [mlp_graph(), batch_norm_graph(), control_flow_graph(), literal_graph(_LITERALS)]
    for graph in graphs:
        validator.validate(dump_document(graph))
    document = dump_document(mlp_graph())
    document["graph"]["nodes"][0]["args"] = [{"$ref": 1}]
    assert not validator.is_valid(document)
