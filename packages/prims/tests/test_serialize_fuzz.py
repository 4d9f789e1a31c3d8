"""Fuzzing `loads`: mutated bytes and mutated JSON documents must load or raise a clean
GraphFormatError, never another exception, and never the decoder's "internal error"."""

from __future__ import annotations

import copy
from typing import Any

import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from ember.prims.serialize import dumps, loads
from ember.prims.serialize.container import frame
from ember.prims.serialize.encode import encode_document
from ember.prims.source import SourceLocation
from ember.prims.specs import ScalarSpec, SymbolInfo, TensorSpec, symbol

CPU = torch.device("cpu")
S0 = symbol("s0")
LEAF = TreeSpec("leaf")
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _spec(*shape: Any, dtype: torch.dtype = torch.float32) -> TensorSpec:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return TensorSpec(dtype, tuple(shape), tuple(strides), CPU)


def fuzz_graph() -> Graph:
    """One graph that exercises every part of the format."""
    body = Graph(
        inputs=[GraphInput(Value("a", _spec(2)))],
        nodes=[Node("aten::neg.default", [Ref("a")], {}, [Value("n", _spec(2))])],
        in_spec=TreeSpec("tuple", (LEAF,)),
        input_leaves=[Ref("a")],
        output_leaves=[Ref("n")],
        name="body",
    )
    pieces = [Value("split", _spec(2, 2)), Value("split_1", _spec(2, 2))]
    where = SourceLocation("/user/model.py", 7, "forward", "y = x * c")
    return Graph(
        inputs=[
            GraphInput(Value("x", _spec(S0, 2))),
            GraphInput(Value("c", _spec(2)), InputKind.CONSTANT, "c0"),
            GraphInput(Value("w", _spec(4, 2)), InputKind.PARAMETER, "w"),
        ],
        nodes=[
            Node("aten::mul.Tensor", [Ref("w"), Ref("c")], {}, [Value("mul", _spec(4, 2))], where),
            Node("aten::split.Tensor", [Ref("mul"), 2], {"dim": 0}, [pieces]),
            Node(
                "aten::cat.default",
                [[Ref("split_1"), None, Ref("split")], -1],
                {},
                [Value("cat", _spec(4, 2))],
            ),
            Node(
                "aten::full.default",
                [[S0, 2], 1.5],
                {
                    "dtype": torch.bfloat16,
                    "layout": torch.strided,
                    "device": CPU,
                    "pin_memory": False,
                },
                [Value("full", _spec(S0, 2, dtype=torch.bfloat16))],
            ),
            Node("aten::sym_size.int", [Ref("x"), 0], {}, [Value("size", ScalarSpec("int", S0))]),
        ],
        in_spec=TreeSpec("tuple", (TreeSpec("dict", (LEAF,), ("x",)),)),
        input_leaves=[Ref("x")],
        out_spec=TreeSpec("tuple", (LEAF,) * 9),
        output_leaves=[
            Ref("cat"),
            Ref("full"),
            Ref("size"),
            (1, 2**60, "s"),
            complex(1, -0.0),
            float("nan"),
            S0 // 2 + sympy.Rational(1, 3),
            torch.channels_last,
            SubgraphRef("body"),
        ],
        symbols={"s0": SymbolInfo("s0", 2, 64, 4)},
        guards=[
            ShapeGuard(sympy.And(S0 > 1, sympy.Le(S0 % 3, sympy.Float(2.5))), where),
            ShapeGuard(sympy.Eq(sympy.Max(S0, 3), sympy.ceiling(S0 / 2))),
        ],
        constants={
            "c0": torch.tensor([1.0, -2.0]),
            "w": torch.randn(4, 2, dtype=torch.float64).float(),
        },
        subgraphs={"body": body},
        meta={"pass": "fuzz"},
    )


GRAPH = fuzz_graph()
DATA = dumps(GRAPH)
DOCUMENT, BLOB = encode_document(GRAPH)


def _check(data: bytes) -> None:
    try:
        graph = loads(data)
    except GraphFormatError as error:
        assert "internal error" not in str(error), str(error)
        return
    # Whatever loads accepts is a Graph that serializes again and reloads.
    assert isinstance(graph, Graph)
    assert isinstance(loads(dumps(graph)), Graph)


def test_fuzz_graph_round_trips() -> None:
    assert dumps(loads(DATA)) == DATA


# ---- byte mutations ----------------------------------------------------------------------------

_BYTE_EDIT = st.tuples(
    st.sampled_from(["flip", "truncate", "insert", "delete", "set"]),
    st.floats(0, 1),
    st.binary(min_size=1, max_size=8),
)


@FUZZ
@given(st.lists(_BYTE_EDIT, min_size=1, max_size=4))
def test_mutated_bytes(edits: list[tuple[str, float, bytes]]) -> None:
    data = bytearray(DATA)
    for kind, where, payload in edits:
        at = int(where * len(data))
        if kind == "flip" and data:
            data[min(at, len(data) - 1)] ^= payload[0] or 1
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = payload
        elif kind == "delete":
            del data[at : at + len(payload)]
        elif kind == "set" and data:
            data[at : at + len(payload)] = payload
    _check(bytes(data))


# ---- structural mutations ----------------------------------------------------------------------

_WORDS = [
    "x", "c", "w", "mul", "split", "split_1", "cat", "full", "size", "body", "c0", "s0", "s1",
    "$ref", "$subgraph", "$tuple", "$int", "$float", "$complex", "$dtype", "$device", "$layout",
    "$memory_format", "$sym", "op", "args", "kind", "name", "spec", "tensor", "scalar", "leaf",
    "dict", "tuple", "list", "children", "keys", "Add", "Mul", "Pow", "Mod", "floor", "ceiling",
    "Max", "Min", "Eq", "Ne", "Lt", "And", "Not", "Rational", "Float", "Infinity", "NaN",
    "float32", "bfloat16", "bool", "qint8", "cpu", "cuda:0", "meta", "strided", "channels_last",
    "aten::relu.default", "aten::split.Tensor", "inf", "nan", "user", "parameter", "constant",
    "-0x1", "0x3", "12345678901234567890", "", "import os",
]  # fmt: skip
_INTS = st.one_of(
    st.integers(-3, 70),
    st.sampled_from([2**53, 2**53 + 1, 2**62, 2**62 + 1, 2**63, -(2**63) - 1, 2**255, 2**300]),
)
_SCALARS = st.one_of(
    st.none(), st.booleans(), _INTS, st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(_WORDS), st.text(max_size=4),
)  # fmt: skip
_JSON = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(_WORDS), children, max_size=3),
    ),
    max_leaves=12,
)


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(tree, dict):
        for key, item in tree.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(tree, list):
        for index, item in enumerate(tree):
            found += _paths(item, (*prefix, index))
    return found


_ALL_PATHS = _paths(DOCUMENT)


def _mutate(document: Any, path: tuple[Any, ...], kind: str, replacement: Any) -> Any:
    if not path:
        return replacement if kind == "replace" else document
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if kind == "replace":
        parent[last] = replacement
    elif kind == "delete":
        del parent[last]
    elif kind == "duplicate" and isinstance(parent, list):
        parent.insert(last, copy.deepcopy(parent[last]))
    elif kind == "swap" and isinstance(parent, list) and len(parent) > 1:
        other = (last + 1) % len(parent)
        parent[last], parent[other] = parent[other], parent[last]
    elif kind == "wrap":
        parent[last] = {"$tuple": [parent[last]]} if isinstance(parent, list) else [parent[last]]
    return document


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(_ALL_PATHS) - 1),
            st.sampled_from(["replace", "replace", "delete", "duplicate", "swap", "wrap"]),
            _JSON,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_mutated_documents(edits: list[tuple[int, str, Any]]) -> None:
    document = copy.deepcopy(DOCUMENT)
    for index, kind, replacement in edits:
        paths = _paths(document)
        document = _mutate(document, paths[index % len(paths)], kind, replacement)
    _check(frame(document, BLOB))
