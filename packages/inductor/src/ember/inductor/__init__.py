"""ember-inductor: lowers ember Graphs to fused kernels.

`compile_graph(graph, example_inputs)` runs the pipeline (decompose, lower to the loop-level
IR, schedule and fuse, generate C++/OpenMP, build and load); `inductor` is the backend that
`ember.compile` finds through the `ember.backends` entry point. The Graph passes that run
before lowering (`eliminate_dead_code`, `eliminate_common_subexpressions`) are public too.
"""

from ember.inductor.backend import inductor
from ember.inductor.codegen.backend import CodegenBackend, KernelArgument, KernelSource
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.compiled import CompiledGraph
from ember.inductor.config import InductorConfig
from ember.inductor.errors import CompileError, InductorError, LoweringError
from ember.inductor.passes.common_subexpressions import eliminate_common_subexpressions
from ember.inductor.passes.dead_code import eliminate_dead_code
from ember.inductor.passes.effects import (
    SEEDED_RANDOM_OPS,
    SIDE_EFFECT_OPS,
    is_effectful,
    is_seeded_random,
)
from ember.inductor.pipeline import compile_graph

__all__ = [
    "SEEDED_RANDOM_OPS",
    "SIDE_EFFECT_OPS",
    "CodegenBackend",
    "CompileError",
    "CompiledGraph",
    "CppBackend",
    "InductorConfig",
    "InductorError",
    "KernelArgument",
    "KernelSource",
    "LoweringError",
    "compile_graph",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "inductor",
    "is_effectful",
    "is_seeded_random",
]
