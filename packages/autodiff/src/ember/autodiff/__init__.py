"""ember-autodiff: ahead-of-time autograd for ember Graphs.

`aot(graph, example_inputs, fw_compiler, bw_compiler)` functionalizes a Graph, traces its
forward and backward through the real autograd engine into one joint Graph, partitions it
with a min-cut over what the forward saves, and wraps the compiled halves in an
`autograd.Function`; `aot_eager` is the backend that interprets both halves. The passes are
public too (`functionalize`, `trace_joint`, `partition`), as is the alias analysis.
"""

from ember.autodiff.aliasing import (
    UNDECLARED_WRITES,
    AliasInfo,
    InputMutation,
    OutputAlias,
    Write,
    analyze_aliasing,
)
from ember.autodiff.aot import Compiler, aot, aot_eager
from ember.autodiff.errors import (
    AliasAnalysisError,
    AutodiffError,
    DoubleBackwardError,
    FunctionalizationError,
    PartitionError,
)
from ember.autodiff.functional_ops import FUNCTIONAL_RULES, FUNCTIONAL_VARIANTS
from ember.autodiff.functionalize import FunctionalGraph, OutputSource, Signature, functionalize
from ember.autodiff.joint import JointGraph, trace_joint
from ember.autodiff.partition import (
    PARTITIONERS,
    RECOMPUTABLE_OPS,
    Partition,
    is_recomputable,
    partition,
)
from ember.autodiff.runtime import CompiledFunction
from ember.autodiff.view_rules import VIEW_INVERSES, ViewStep

__all__ = [
    "FUNCTIONAL_RULES",
    "FUNCTIONAL_VARIANTS",
    "PARTITIONERS",
    "RECOMPUTABLE_OPS",
    "UNDECLARED_WRITES",
    "VIEW_INVERSES",
    "AliasAnalysisError",
    "AliasInfo",
    "AutodiffError",
    "CompiledFunction",
    "Compiler",
    "DoubleBackwardError",
    "FunctionalGraph",
    "FunctionalizationError",
    "InputMutation",
    "JointGraph",
    "OutputAlias",
    "OutputSource",
    "Partition",
    "PartitionError",
    "Signature",
    "ViewStep",
    "Write",
    "analyze_aliasing",
    "aot",
    "aot_eager",
    "functionalize",
    "is_recomputable",
    "partition",
    "trace_joint",
]
