"""A kernel variant (kernel, launch config, alignment, target) and how it is compiled.

This is the specialization rule, in one place: the signature is ours (constexprs come from the
`LaunchConfig`, sizes are never specialized) and the aligned variant marks every pointer
`tt.divisibility=16`. The compile workers load this file by path, so it imports only the
standard library (and triton, lazily): workers and this process build the same `ASTSource`
and so hit the same entry of Triton's cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

MODULE_PREFIX = "ember_triton_"


@dataclass(frozen=True)
class Variant:
    """Everything that decides one compiled binary; plain data, sent to compile workers as JSON."""

    path: str  # the kernel module's file
    kernel: str  # the @triton.jit function's name in that module
    signature: tuple[tuple[str, str], ...]  # non-constexpr params in order, triton type strings
    constants: tuple[tuple[str, int], ...]  # constexpr values (from the LaunchConfig)
    num_warps: int
    num_stages: int
    aligned: bool  # every pointer param is 16-byte aligned
    target: tuple[str, int | str, int]  # GPUTarget fields: backend, arch, warp size

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Variant:
        data = json.loads(text)
        return cls(
            path=data["path"],
            kernel=data["kernel"],
            signature=tuple((name, kind) for name, kind in data["signature"]),
            constants=tuple((name, int(value)) for name, value in data["constants"]),
            num_warps=int(data["num_warps"]),
            num_stages=int(data["num_stages"]),
            aligned=bool(data["aligned"]),
            target=(data["target"][0], data["target"][1], int(data["target"][2])),
        )


def module_name(path: str | os.PathLike[str]) -> str:
    """The name a kernel module file is imported under (the same in every process)."""
    stem = Path(path).stem
    return MODULE_PREFIX + (
        stem if stem.isidentifier() else hashlib.sha256(stem.encode()).hexdigest()
    )


def import_source_file(path: str | os.PathLike[str], name: str | None = None) -> ModuleType:
    """Import the Python file at `path` (a real file: @triton.jit reads its source back)."""
    name = name or module_name(path)
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the kernel module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def ast_source(function: Any, variant: Variant) -> Any:
    """The `triton.compiler.ASTSource` of `variant` for the @triton.jit `function`."""
    from triton.compiler import ASTSource

    types = dict(variant.signature)
    constants = dict(variant.constants)
    signature: dict[str, str] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for index, name in enumerate(function.arg_names):
        if name in constants:
            signature[name] = "constexpr"
        elif name in types:
            signature[name] = types[name]
            if variant.aligned and types[name].startswith("*"):
                attrs[(index,)] = [["tt.divisibility", 16]]
        else:
            raise TypeError(
                f"parameter {name!r} of Triton kernel {variant.kernel!r} is neither in the "
                f"signature nor a constant of the launch config"
            )
    return ASTSource(function, signature, constants, attrs)


@contextlib.contextmanager
def triton_cache_scope(directory: str | None) -> Iterator[None]:
    """Point Triton's compile cache at `directory` for the duration (None: leave it as is)."""
    if directory is None:
        yield
        return
    from triton import knobs

    with knobs.cache.scope():
        knobs.cache.dir = directory
        yield


def compile_variant(function: Any, variant: Variant, cache_dir: str | None) -> Any:
    """Compile `variant` of the @triton.jit `function`: a `triton.compiler.CompiledKernel`."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import compile as triton_compile

    source = ast_source(function, variant)
    options = {"num_warps": variant.num_warps, "num_stages": variant.num_stages}
    with triton_cache_scope(cache_dir):
        return triton_compile(source, target=GPUTarget(*variant.target), options=options)


def compile_variant_file(variant: Variant, cache_dir: str | None) -> Any:
    """`compile_variant` for a variant whose module is not imported yet (compile workers)."""
    name = module_name(variant.path)
    module = sys.modules.get(name) or import_source_file(variant.path, name)
    return compile_variant(getattr(module, variant.kernel), variant, cache_dir)


def build_launcher(compiled: Any, cache_dir: str | None) -> None:
    """Build Triton's C launcher for `compiled` into the Triton cache, so that the process
    loading the kernel finds it there instead of running the C compiler itself (compile
    workers build them in parallel). Loading the built module needs the CUDA driver library;
    without it the build is cached all the same and the error propagates."""
    if compiled.metadata.target.backend != "cuda":
        return
    from triton.backends.nvidia.driver import CudaLauncher

    with triton_cache_scope(cache_dir):
        CudaLauncher(compiled.src, compiled.metadata)
