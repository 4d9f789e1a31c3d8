"""The `inductor` backend (entry point `ember.backends`): a captured Graph in, a callable out.

Inference (no input needs a gradient, or grad mode is off) compiles the Graph directly. For
training it hands the Graph to ember-autodiff's `aot`, with inductor compiling both the
forward and the backward Graph.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph
from ember.prims import Graph, Interpreter, autocast_disabled
from ember.prims.config import load
from ember.prims.logs import topic_logger

perf_hints = topic_logger("perf_hints")
logger = logging.getLogger("ember.inductor")


# ember.compile modes, as torch.compile names them, and what each sets.
MODES: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {},
    "max-autotune": {"max_autotune": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True},
}


def inductor(
    graph: Graph,
    example_inputs: Sequence[Any],
    *,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """Compile `graph` with ember-inductor (see the package README). `mode` is one of
    `MODES`; `options` sets `InductorConfig` fields by name (`{"max_autotune": True}`)."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; ember-inductor knows {sorted(MODES)}")
    overrides = {**MODES.get(mode or "default", {}), **(options or {})}
    config = dataclasses.replace(load(InductorConfig), **overrides)

    def _compile(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        return compile_graph(graph, example_inputs, config=config)

    with autocast_disabled():  # the Graph holds autocast's casts already
        return _compile_for_mode(graph, example_inputs, _compile)


def _compile_for_mode(
    graph: Graph,
    example_inputs: Sequence[Any],
    compile_fn: Callable[[Graph, Sequence[Any]], Callable[..., Any]],
) -> Callable[..., Any]:
    if torch.is_grad_enabled() and _needs_grad(graph, example_inputs):
        aot = _aot()
        if aot is None:
            perf_hints.info(
                "graph %s needs gradients but ember.autodiff.aot is not available; it runs "
                "uncompiled (install ember-autodiff with aot support)",
                graph.name,
            )
            return Interpreter(graph)
        return aot(graph, example_inputs, fw_compiler=compile_fn, bw_compiler=compile_fn)
    return compile_fn(graph, example_inputs)


def _needs_grad(graph: Graph, example_inputs: Sequence[Any]) -> bool:
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        return True
    return any(t.requires_grad for t in graph.constants.values())


def _aot() -> Callable[..., Any] | None:
    try:
        from ember.autodiff import aot
    except ImportError:
        return None
    return aot
