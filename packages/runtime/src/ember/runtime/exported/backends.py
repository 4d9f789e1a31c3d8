"""Backend names for exported programs, resolved without ember-capture.

`None`, "eager" and "interpreter" run the Graph with ember-prims' interpreter; any other
name is looked up in the `ember.backends` entry-point group (the one ember-capture's registry
reads), and a callable is used as it is: `(graph, example_inputs) -> compiled`.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Sequence
from typing import Any

from ember.prims import Graph, Interpreter

Backend = Callable[[Graph, Sequence[Any]], Callable[..., Any]]
ENTRY_POINT_GROUP = "ember.backends"
INTERPRETED = (None, "eager", "interpreter")


def interpreter(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """The reference backend: ember-prims' interpreter, one ATen call per node."""
    del example_inputs
    return Interpreter(graph)


def resolve_backend(backend: str | Backend | None) -> Backend:
    """The backend `backend` names (or is); LookupError naming the installed ones."""
    if backend in INTERPRETED:
        return interpreter
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a name or a callable, got {type(backend).__name__}")
    found = [
        ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == backend
    ]
    if found:
        loaded: Backend = found[0].load()
        return loaded
    if backend == "inductor":  # a source checkout without installed entry points
        module = importlib.import_module("ember.inductor.backend")
        inductor: Backend = module.inductor
        return inductor
    names = sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})
    raise LookupError(
        f"no ember backend {backend!r} is installed (installed: {', '.join(names) or 'none'}); "
        "pass a backend callable or install the package that provides it"
    )
