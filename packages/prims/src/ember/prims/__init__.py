"""ember-prims: the Graph format every ember layer speaks, and the tools around it.

The Graph and its specs, the tracer (`trace`), symbolic sizes, the interpreter (`run`),
serialization (`dumps`/`loads`/`save`/`load`), printing and verification.
"""

from ember.prims.errors import (
    GraphFormatError,
    GraphVerificationError,
    InterpreterError,
    PrimsError,
    TraceError,
)
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
from ember.prims.interpreter import Interpreter, run
from ember.prims.ops import op_name, parse_op_name, register_op, resolve_op
from ember.prims.printer import format_graph
from ember.prims.pytree import TreeSpec, tree_flatten, tree_unflatten
from ember.prims.source import SourceLocation
from ember.prims.specs import ScalarSpec, SymbolInfo, TensorSpec
from ember.prims.tracer import Tracer, TracerTensor, trace
from ember.prims.verify import verify

__all__ = [
    "Graph",
    "GraphFormatError",
    "GraphInput",
    "GraphVerificationError",
    "InputKind",
    "Interpreter",
    "InterpreterError",
    "Node",
    "PrimsError",
    "Ref",
    "ScalarSpec",
    "ShapeGuard",
    "SourceLocation",
    "SubgraphRef",
    "SymbolInfo",
    "TensorSpec",
    "TraceError",
    "Tracer",
    "TracerTensor",
    "TreeSpec",
    "Value",
    "format_graph",
    "op_name",
    "parse_op_name",
    "register_op",
    "resolve_op",
    "run",
    "trace",
    "tree_flatten",
    "tree_unflatten",
    "verify",
]
