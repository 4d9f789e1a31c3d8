"""ember-prims: the Graph format every ember layer speaks, and the tools around it.

The Graph and its specs, the tracer (`trace`), symbolic sizes, the interpreter (`run`),
serialization (`dumps`/`loads`/`save`/`load`), printing and verification.
"""

from ember.prims.atomic_file import write_atomically
from ember.prims.autocast import autocast_disabled, autocast_enabled
from ember.prims.boundary import cross_boundary
from ember.prims.decompositions import (
    CORE_ATEN_DECOMPOSITIONS,
    PRIM_DECOMPOSITIONS,
    DecompositionError,
    decompose,
    to_core_aten,
    to_prims,
)
from ember.prims.errors import (
    GraphFormatError,
    GraphVerificationError,
    InterpreterError,
    PrimsError,
    TraceError,
)
from ember.prims.exported import ExportedProgram, load_program
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
from ember.prims.primitives import PRIMS, Prim, is_prim
from ember.prims.printer import format_graph
from ember.prims.pytree import TreeSpec, tree_flatten, tree_unflatten
from ember.prims.serialize import FORMAT_VERSION, dump_document, dumps, load, loads, save
from ember.prims.source import SourceLocation
from ember.prims.specs import ScalarSpec, SymbolInfo, TensorSpec
from ember.prims.symbolic import ShapeEnv
from ember.prims.tracer import Tracer, TracerTensor, trace
from ember.prims.verify import verify

__all__ = [
    "CORE_ATEN_DECOMPOSITIONS",
    "FORMAT_VERSION",
    "PRIMS",
    "PRIM_DECOMPOSITIONS",
    "DecompositionError",
    "ExportedProgram",
    "Graph",
    "GraphFormatError",
    "GraphInput",
    "GraphVerificationError",
    "InputKind",
    "Interpreter",
    "InterpreterError",
    "Node",
    "Prim",
    "PrimsError",
    "Ref",
    "ScalarSpec",
    "ShapeEnv",
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
    "autocast_disabled",
    "autocast_enabled",
    "cross_boundary",
    "decompose",
    "dump_document",
    "dumps",
    "format_graph",
    "is_prim",
    "load",
    "load_program",
    "loads",
    "op_name",
    "parse_op_name",
    "register_op",
    "resolve_op",
    "run",
    "save",
    "to_core_aten",
    "to_prims",
    "trace",
    "tree_flatten",
    "tree_unflatten",
    "verify",
    "write_atomically",
]
