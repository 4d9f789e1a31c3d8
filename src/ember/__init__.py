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
