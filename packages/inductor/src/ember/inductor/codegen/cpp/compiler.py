"""Compile a C++ module into a shared library with the system compiler.

`g++ -O3 -march=native -fopenmp -shared -fPIC`; the build runs in a temporary directory and
only its finished output is returned, so a process killed mid-compile leaves nothing behind
that a later run could mistake for a library.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from pathlib import Path

from ember.inductor.errors import CompileError

COMPILER = os.environ.get("CXX", "g++")
FLAGS = (
    "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-w",
    # errno and FP traps are never observed by torch's semantics; without them GCC can
    # vectorize sqrt and if-convert masked loads
    "-fno-math-errno", "-fno-trapping-math",
    # no sinking of a value into the branch of the select that reads it: GCC 12 sank the call
    # of a `where(mask, 0, exp(x) / s)`'s `ember_exp` into a conditional block and then
    # could not if-convert the loop ("control flow in loop"), so BERT's attention-probability
    # kernels (softmax backward, dropout) ran scalar; the kernels' loops are meant for SIMD
    "-fno-tree-sink",
)  # fmt: skip
# glibc declares the SIMD variants of expf, erff, tanhf, ... (libmvec) only when this macro
# is set; defining it changes no arithmetic (that is -ffast-math, which is not used). Used
# only where a test program links against libmvec (glibc on x86-64 and aarch64).
VECTOR_MATH = ("-D__FAST_MATH__", "-lmvec")
PROBE_SOURCE = '#include <cmath>\nextern "C" float probe(float x) { return std::exp(x); }\n'


@functools.cache
def vector_math_flags() -> tuple[str, ...]:
    """`VECTOR_MATH` if the compiler can link against glibc's vector math library, else ().
    Runs g++ (0.4-0.5 s): `probe_cache.vector_math_flags` keeps the answer across processes."""
    with tempfile.TemporaryDirectory(prefix="ember-cpp-probe-") as directory:
        source = Path(directory) / "probe.cpp"
        source.write_text(PROBE_SOURCE)
        command = [
            COMPILER,
            *FLAGS,
            str(source),
            "-o",
            str(Path(directory) / "probe.so"),
            *VECTOR_MATH,
        ]
        try:
            result = subprocess.run(command, capture_output=True, check=False)
        except OSError:
            return ()
        return VECTOR_MATH if result.returncode == 0 else ()


@functools.cache
def compiler_version() -> str:
    try:
        result = subprocess.run([COMPILER, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        raise CompileError(
            f"no C++ compiler: running {COMPILER!r} failed ({error}); install g++ or set CXX"
        ) from error
    return result.stdout.splitlines()[0] if result.stdout else COMPILER


def compile_shared_library(source: str, vector_math: tuple[str, ...] | None = None) -> bytes:
    """The bytes of the shared library built from `source`; `vector_math` is the probe's
    answer when the caller has it (else the probe runs here)."""
    compiler_version()
    if vector_math is None:
        vector_math = vector_math_flags()
    with tempfile.TemporaryDirectory(prefix="ember-cpp-") as directory:
        source_path = Path(directory) / "module.cpp"
        output_path = Path(directory) / "module.so"
        source_path.write_text(source)
        command = [COMPILER, *FLAGS, str(source_path), "-o", str(output_path), *vector_math]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise CompileError(
                f"the C++ compiler rejected generated code (a bug in ember-inductor; please "
                f"report it with EMBER_LOGS=output_code):\n{result.stderr[-4000:]}"
            )
        return output_path.read_bytes()
