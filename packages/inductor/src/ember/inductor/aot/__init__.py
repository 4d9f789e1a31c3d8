"""Ahead-of-time packages: an exported program compiled once, loaded with no compiler.

`aot_compile(program, path)` saves the program (Graph + weights) and beside it, under
`aot/`, the wrapper plan (the generated Python wrapper and the extern ops it calls) and the
compiled kernels: one C++ shared library for a CPU program, per-GPU-target cubins for a CUDA
program. `load_package(path)` runs it with neither Triton nor a C++ compiler, after checking
the running device and versions against the plan.
"""

from ember.inductor.aot.load import AotPackageError, load_package
from ember.inductor.aot.package import AOT_FOLDER, aot_compile, has_package

__all__ = ["AOT_FOLDER", "AotPackageError", "aot_compile", "has_package", "load_package"]
