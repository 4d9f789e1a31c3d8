"""The backends a model runs under: eager (the baseline), torch.compile (the peer), and ember.

ember backends are found by name at run time: every name in `ember.capture.list_backends()`
becomes `ember:<name>`, compiled with `ember.compile(module, backend=name)`. Until those
exist, each is reported as not available with the reason, so the suite never needs a code
change when a backend lands.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

REPOSITORY = Path(__file__).resolve().parent.parent
EMBER_PREFIX = "ember:"
TORCH_COMPILE = "torch.compile"


@dataclass(frozen=True)
class GraphCounts:
    """Graphs captured and graph breaks taken by one compile, where the backend can tell."""

    graphs: int | None
    breaks: int | None


@dataclass(frozen=True)
class Backend:
    """How to compile a module under one named backend, and how to reset its caches."""

    name: str
    kind: str  # "baseline", "peer" or "ember"
    compile: Callable[[nn.Module], Callable[..., Any]]
    reset: Callable[[], None]
    counts: Callable[[], GraphCounts]
    unavailable: str | None = None


def ember_source_paths() -> list[str]:
    """The repository's source folders for the ember packages (a fallback to installed wheels)."""
    paths = [REPOSITORY / "src", *sorted((REPOSITORY / "packages").glob("*/src"))]
    return [str(path) for path in paths if path.is_dir()]


def ensure_ember_importable() -> str:
    """Makes `import ember.capture` work, from wheels or else from this source tree.

    Returns where ember comes from: "installed", "source tree" or "missing". The source paths
    are also added to PYTHONPATH so that worker processes find the same ember.
    """
    if _find("ember.capture"):
        origin = str(_origin("ember.capture"))
        return "source tree" if origin.startswith(str(REPOSITORY / "packages")) else "installed"
    paths = ember_source_paths()
    if not paths:
        return "missing"
    sys.path[:0] = [p for p in paths if p not in sys.path]
    existing = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + ([existing] if existing else []))
    importlib.invalidate_caches()
    for name in [m for m in sys.modules if m == "ember" or m.startswith("ember.")]:
        del sys.modules[name]
    return "source tree" if _find("ember.capture") else "missing"


def _find(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _origin(module: str) -> str | None:
    found = importlib.util.find_spec(module)
    return None if found is None else found.origin or str(found.submodule_search_locations)


def _import(module: str) -> tuple[ModuleType | None, str | None]:
    try:
        return importlib.import_module(module), None
    except Exception as error:  # a broken package is "not available", not a crash
        return None, f"import {module} failed: {type(error).__name__}: {error}"


def ember_backend_names() -> tuple[list[str], str | None]:
    """The names ember's registry lists, or an empty list and the reason there are none."""
    capture, problem = _import("ember.capture")
    if capture is None:
        return [], problem
    list_backends = getattr(capture, "list_backends", None)
    if list_backends is None:
        return [], "ember.capture has no list_backends() yet"
    try:
        return sorted(str(name) for name in list_backends()), None
    except Exception as error:
        return [], f"ember.capture.list_backends() failed: {type(error).__name__}: {error}"


def _ember_compile_function() -> tuple[Callable[..., Any] | None, str]:
    """`ember.compile`, else `ember.capture.compile`, else why neither exists."""
    for module_name in ("ember", "ember.capture"):
        module, _ = _import(module_name)
        function = getattr(module, "compile", None) if module is not None else None
        if callable(function):
            return function, f"{module_name}.compile"
    return (
        None,
        "ember.compile does not exist yet (neither ember.compile nor ember.capture.compile)",
    )


def _ember_reset() -> None:
    for module_name in ("ember", "ember.capture"):
        module, _ = _import(module_name)
        reset = getattr(module, "reset", None) if module is not None else None
        if callable(reset):
            reset()
            return


def _ember_counts() -> GraphCounts:
    """Graph and break counts from ember's own counters, when it exposes `ember.capture.stats()`."""
    capture, _ = _import("ember.capture")
    stats = getattr(capture, "stats", None) if capture is not None else None
    if not callable(stats):
        return GraphCounts(None, None)
    try:
        values = stats()
    except Exception:  # counts are optional
        return GraphCounts(None, None)
    get = values.get if isinstance(values, dict) else lambda key: getattr(values, key, None)
    return GraphCounts(get("graphs"), get("graph_breaks"))


def ember_backend(name: str) -> Backend:
    """`ember:<name>`: compiled by `ember.compile(module, backend=name)` when that exists."""
    function, origin = _ember_compile_function()
    names, problem = ember_backend_names()
    unavailable = None
    if function is None:
        unavailable = origin
    elif problem is not None:
        unavailable = problem
    elif name not in names:
        unavailable = f"ember backend {name!r} is not registered (have: {', '.join(names)})"

    def compile_module(module: nn.Module) -> Callable[..., Any]:
        assert function is not None
        return function(module, backend=name)

    return Backend(
        EMBER_PREFIX + name, "ember", compile_module, _ember_reset, _ember_counts, unavailable
    )


def _identity(module: nn.Module) -> Callable[..., Any]:
    return module


def _nothing() -> None:
    return None


def _no_counts() -> GraphCounts:
    return GraphCounts(None, None)


def eager_backend() -> Backend:
    """Plain PyTorch eager: the baseline every speedup and accuracy figure is relative to."""
    return Backend("eager", "baseline", _identity, _nothing, _no_counts)


def torch_compile_backend(name: str = TORCH_COMPILE) -> Backend:
    """torch.compile, the peer: `torch.compile` (inductor) or `torch.compile:<backend>`."""
    import torch

    torch_backend = name.split(":", 1)[1] if ":" in name else "inductor"

    def compile_module(module: nn.Module) -> Callable[..., Any]:
        _torch_counters().clear()
        return torch.compile(module, backend=torch_backend)

    def reset() -> None:
        torch._dynamo.reset()

    def counts() -> GraphCounts:
        counters = _torch_counters()
        return GraphCounts(
            int(counters["stats"]["unique_graphs"]), int(sum(counters["graph_break"].values()))
        )

    return Backend(name, "peer", compile_module, reset, counts)


def _torch_counters() -> Any:
    # Benchmarks may use torch's compiler as the peer (DESIGN.md); its counters give the
    # number of graphs captured and breaks taken.
    from torch._dynamo.utils import counters

    return counters


def resolve(names: list[str]) -> list[Backend]:
    """The backends named on the command line; "ember" expands to every registered ember name."""
    backends: list[Backend] = []
    for name in names:
        if name == "eager":
            backends.append(eager_backend())
        elif name == TORCH_COMPILE or name.startswith(TORCH_COMPILE + ":"):
            backends.append(torch_compile_backend(name))
        elif name == "ember":
            found, problem = ember_backend_names()
            if not found:
                backends.append(_unavailable("ember", problem or "no ember backends registered"))
            backends.extend(ember_backend(n) for n in found)
        elif name.startswith(EMBER_PREFIX):
            backends.append(ember_backend(name[len(EMBER_PREFIX) :]))
        else:
            raise ValueError(f"unknown backend {name!r}: use eager, torch.compile[:x], ember[:x]")
    return backends


def _unavailable(name: str, reason: str) -> Backend:
    return Backend(name, "ember", _identity, _nothing, _no_counts, unavailable=reason)


def lookup(name: str) -> Backend:
    """One backend by its full name (as written in results), for worker processes."""
    if name == "ember":
        return _unavailable("ember", ember_backend_names()[1] or "no ember backends registered")
    (backend,) = resolve([name])
    return backend
