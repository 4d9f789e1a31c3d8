"""ember: makes PyTorch programs fast without changing them.

The umbrella package: it re-exports the public API of `ember.prims` and `ember.capture`
(`ember.compile`, `ember.trace`, ...) and `ember.cudagraph_mark_step_begin`, and extends `__path__` so that the layer portions of
the `ember` namespace stay importable when the layers are installed from separate wheels or
as editable source trees.
"""

from __future__ import annotations

import importlib
from pkgutil import extend_path
from typing import Any

__path__ = extend_path(__path__, __name__)
__version__ = "0.1.0"

# Each layer module whose whole `__all__` the umbrella re-exports; later layers join the list.
_REEXPORTED = ("ember.prims", "ember.capture")


def _reexport() -> list[str]:
    names: list[str] = []
    for module_name in _REEXPORTED:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            globals()[name] = getattr(module, name)
            names.append(name)
    return names


__all__ = _reexport()

# torch.compiler.cudagraph_mark_step_begin's counterpart (ember-runtime's CUDA graph trees)
from ember.runtime.cudagraphs.step import mark_step_begin as cudagraph_mark_step_begin  # noqa: E402

__all__ += ["cudagraph_mark_step_begin"]


def __getattr__(name: str) -> Any:
    # Layers (`ember.capture`, ...) load on first use, like `import ember.capture` would.
    if name in ("prims", "capture", "autodiff", "inductor", "runtime"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'ember' has no attribute {name!r}")


def load_exported(path: Any, backend: Any = None) -> Any:
    """The program `ember.export(...).save(path)` (or `ember.aot_compile`) wrote, as a callable
    `LoadedProgram`. `backend`: None runs an ahead-of-time package's precompiled kernels when
    the folder holds one and interprets the Graph otherwise; "aot" insists on the package;
    "eager" interprets; "inductor" (or any backend name or callable) compiles on first call.
    Loading needs neither the model's code nor ember-capture."""
    from pathlib import Path

    from ember.runtime.exported import LoadedProgram
    from ember.runtime.exported import load_exported as load_with_backend

    if backend in (None, "aot") and (Path(path) / "aot" / "plan.json").is_file():
        from ember.inductor.aot import load_package

        program, compiled = load_package(path)
        return LoadedProgram(program, compiled=compiled)
    if backend == "aot":
        raise FileNotFoundError(
            f"{path} holds no ahead-of-time package (no aot/plan.json); make one with ember.aot_compile"
        )
    return load_with_backend(path, backend)


def aot_compile(program: Any, path: Any, *, targets: Any = None, options: Any = None) -> Any:
    """Save the `ember.export` result `program` at `path` with its compiled kernels (a C++
    shared library, or cubins for each CUDA architecture in `targets`, default the current
    GPU's) and wrapper plan, loadable by `ember.load_exported(path)` with no compiler."""
    from ember.inductor.aot import aot_compile as compile_package

    return compile_package(program, path, targets=targets, options=options)


__all__ += ["aot_compile", "load_exported"]
