"""The built-in `eager` backend: runs the captured Graph with the ember-prims interpreter.

It compiles nothing; it is the reference every other backend is compared against, and the
backend that proves capture works with only ember-prims and ember-capture installed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember.prims import Graph, Interpreter


def eager(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """Return a callable that runs `graph` on user inputs, as `ember.prims.run` takes them."""
    del example_inputs  # the interpreter needs no specialization
    return Interpreter(graph)
