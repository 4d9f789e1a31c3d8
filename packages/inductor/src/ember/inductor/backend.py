"""The `inductor` backend (entry point `ember.backends`): a captured Graph in, a callable out.

Inference (no input needs a gradient, or grad mode is off) compiles the Graph directly. For
training it hands the Graph to ember-autodiff's `aot`, with inductor compiling both the
forward and the backward Graph. `mode="reduce-overhead"` (and "max-autotune", as in
torch.compile) replays the compiled graphs as CUDA graphs from ember-runtime's tree: the
training forward and its backward join one tree, with parameters and buffers read in place.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ember.inductor.compiled import CompiledGraph
from ember.inductor.config import InductorConfig
from ember.inductor.errors import InductorError
from ember.inductor.lowering.graph_lowering import compute_device
from ember.inductor.passes.attention_rng import drop_unread_attention_rng
from ember.inductor.passes.joint_decompositions import JOINT_DECOMPOSITIONS
from ember.inductor.pipeline import compile_graph, saved_layouts
from ember.prims import Graph, Interpreter, TensorSpec, autocast_disabled
from ember.prims.config import load
from ember.prims.logs import topic_logger
from ember.runtime import ArtifactCache
from ember.runtime.cudagraphs import FunctionMode, GraphFunction

perf_hints = topic_logger("perf_hints")
logger = logging.getLogger("ember.inductor")


# ember.compile modes, as torch.compile names them, and what each sets.
MODES: dict[str, dict[str, Any]] = {
    "default": {},
    # CUDA-graph modes replay recordings: the wrapper runs only to warm up and record, where
    # the native wrapper gains nothing (and held 0.5 GB more reserved memory in a
    # Llama-style training tree, session 22); they keep the Python wrapper
    "reduce-overhead": {"native_wrapper": "never"},
    "max-autotune": {"max_autotune": True, "gemm_templates": True, "native_wrapper": "never"},
    "max-autotune-no-cudagraphs": {"max_autotune": True, "gemm_templates": True},
}
# modes whose compiled graphs replay as CUDA graphs (torch.compile's choice)
CUDAGRAPH_MODES = frozenset({"reduce-overhead", "max-autotune"})


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
    saved = _SavedLayouts()

    def _compile(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        strides = saved.for_backward(graph)
        compiled = compile_graph(graph, example_inputs, config=config, input_strides=strides)
        saved.after_forward(graph, compiled)
        return compiled

    with autocast_disabled():  # the Graph holds autocast's casts already
        if mode in CUDAGRAPH_MODES:
            return _compile_for_mode(
                graph,
                example_inputs,
                _compile,
                _CudaGraphs(graph, example_inputs),
                cache=config.cache,
            )
        return _compile_for_mode(graph, example_inputs, _compile, cache=config.cache)


class _SavedLayouts:
    """Hands a training forward's choice of strides for what it saves (channels-last
    activations, `passes/channels_last.py`) to the backward compiled right after it:
    ember-autodiff compiles the forward `(primals) -> (outputs..., saved...)`, then the
    backward `(saved..., tangents...)`, and the partition's Graph meta says how many are
    saved."""

    def __init__(self) -> None:
        self.pending: dict[int, tuple[int, ...]] | None = None

    def after_forward(self, graph: Graph, compiled: CompiledGraph) -> None:
        if "saved_outputs" in graph.meta:
            self.pending = saved_layouts(compiled)

    def for_backward(self, graph: Graph) -> dict[int, tuple[int, ...]] | None:
        if "saved_inputs" not in graph.meta:
            return None
        pending, self.pending = self.pending, None
        if not pending:
            return None
        count = int(graph.meta["saved_inputs"])
        for position, strides in pending.items():
            spec = graph.inputs[position].value.spec if position < count else None
            if not isinstance(spec, TensorSpec) or len(spec.shape) != len(strides):
                raise InductorError(
                    f"backward graph {graph.name}: saved value {position} does not match the "
                    "forward that restrided it; set EMBER_INDUCTOR_LAYOUT_OPTIMIZATION=off and "
                    "report this"
                )
        return pending


class _CudaGraphs:
    """Puts each compiled graph of one captured Graph on the CUDA graph tree. Tensors of the
    captured Graph's constants and the parameters and buffers it takes as inputs are static
    inputs. autodiff compiles a training forward and then its backward: compiling a backward
    marks the forward before it as a training forward, whose backward the tree waits for
    before a new step."""

    def __init__(self, graph: Graph, example_inputs: Sequence[Any]) -> None:
        self.state = {id(t) for t in graph.constants.values()}
        # parameters and buffers the capture passed as inputs (its `state_inputs`): buffers
        # are plain tensors, and the tree would copy them before every replay
        positions = graph.meta.get("state_inputs", "")
        self.state |= {
            id(example_inputs[int(p)])
            for p in positions.split(",")
            if p and int(p) < len(example_inputs)
        }
        self.forward: GraphFunction | None = None

    def inference(
        self, compile_fn: Callable[[Graph, Sequence[Any]], Callable[..., Any]]
    ) -> Callable[[Graph, Sequence[Any]], Callable[..., Any]]:
        def compile_forward(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
            compiled = compile_fn(graph, example_inputs)
            self.forward = self._use(compiled, graph, example_inputs, FunctionMode.INFERENCE)
            return compiled

        return compile_forward

    def backward(
        self, compile_fn: Callable[[Graph, Sequence[Any]], Callable[..., Any]]
    ) -> Callable[[Graph, Sequence[Any]], Callable[..., Any]]:
        def compile_backward(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
            if self.forward is not None:
                self.forward.mode = FunctionMode.FORWARD
                self.forward = None
            # attention without dropout reads none of the RNG state the forward saved (CPU
            # tensors on a GPU): the backward stops reading it, and the tree skips those inputs
            graph = drop_unread_attention_rng(graph)
            compiled = compile_fn(graph, example_inputs)
            self._use(compiled, graph, example_inputs, FunctionMode.BACKWARD)
            return compiled

        return compile_backward

    def _use(
        self, compiled: Any, graph: Graph, example_inputs: Sequence[Any], mode: FunctionMode
    ) -> GraphFunction | None:
        if not isinstance(compiled, CompiledGraph):
            return None
        # a backward's example inputs are placeholders made on first access (ember-autodiff
        # allocates one per saved value): never touched, as none is a parameter; reading them
        # allocated every saved activation's size at compile time (Llama-style: the largest
        # blocks of the first step, +300 MB reserved on the H200)
        static = (
            set()
            if mode is FunctionMode.BACKWARD
            else {
                i
                for i, t in enumerate(example_inputs)
                if id(t) in self.state or isinstance(t, torch.nn.Parameter)
            }
        )
        return compiled.use_cudagraphs(compute_device(graph), static, mode)


def _compile_for_mode(
    graph: Graph,
    example_inputs: Sequence[Any],
    compile_fn: Callable[[Graph, Sequence[Any]], Callable[..., Any]],
    cudagraphs: _CudaGraphs | None = None,
    cache: bool = False,
) -> Callable[..., Any]:
    bw_fn = compile_fn
    if cudagraphs is not None:
        bw_fn = cudagraphs.backward(compile_fn)
        compile_fn = cudagraphs.inference(compile_fn)
    if torch.is_grad_enabled() and _needs_grad(graph, example_inputs):
        aot = _aot()
        if aot is None:
            perf_hints.info(
                "graph %s needs gradients but ember.autodiff.aot is not available; it runs "
                "uncompiled (install ember-autodiff with aot support)",
                graph.name,
            )
            return Interpreter(graph)
        return aot(
            graph,
            example_inputs,
            fw_compiler=compile_fn,
            bw_compiler=bw_fn,
            decompositions=JOINT_DECOMPOSITIONS,
            # a warm start reuses the forward/backward split from the on-disk cache
            store=ArtifactCache() if cache else None,
        )
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
