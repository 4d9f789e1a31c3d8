"""Performance warnings: a compiled graph that runs measurably slower than eager says so once.

After two warm-up calls, `measure` times the compiled callable and ember-prims' interpreter
(the graph's ATen ops run eagerly, one call per node) on copies of the call's inputs,
interleaved, up to five times each within 0.1 s; a verdict of slower is measured once more
to be sure. When the compiled graph's fastest call is at least 1.25x and 20 µs slower than
eager's, it warns (`PerformanceWarning`, attributed to the graph's first user line) with the
graph's source lines and the likely cause: graph breaks, library-bound work (matmul,
convolution, attention run the same vendor kernels either way) or a graph too small for its
per-call overhead. Inference graphs only: timing a training graph would run its backward.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ember.prims import Graph, Interpreter
from ember.prims.minify import clone_inputs

WARM_UP_CALLS = 2
REPEATS = 5
RATIO = 1.25
MARGIN_S = 20e-6
BUDGET_S = 0.1  # timing stops after this much (at least one call each)
MAX_INPUT_BYTES = 256 << 20  # copies of larger inputs cost more memory than the warning is worth
RANDOM_OPS = ("rand", "dropout", "bernoulli", "normal", "uniform", "multinomial", "poisson",
              "exponential", "geometric", "cauchy", "philox", "seed")  # fmt: skip
LIBRARY_OPS = ("mm", "matmul", "conv", "linear", "attention", "baddbmm", "addbmm")


class PerformanceWarning(UserWarning):
    """A compiled graph ran slower than eager on its inputs; the message says why it may be."""


def has_random_ops(graph: Graph) -> bool:
    """Whether running `graph` again would draw from the random number generator."""
    return any(any(word in node.target for word in RANDOM_OPS) for node in graph.nodes)


def source_lines(graph: Graph, limit: int = 4) -> list[str]:
    """The distinct user lines of `graph`'s nodes, `file:line (code)`, at most `limit`."""
    lines: list[str] = []
    for node in graph.nodes:
        if node.source is None:
            continue
        text = node.source.short() + (f" ({node.source.code.strip()})" if node.source.code else "")
        if text not in lines:
            lines.append(text)
    more = len(lines) - limit
    return lines[:limit] + ([f"... {more} more"] if more > 0 else [])


def measurable(graph: Graph, inputs: Sequence[Any]) -> bool:
    """Whether timing `graph` again is harmless: no randomness, no gradients, small inputs."""
    if has_random_ops(graph):
        return False
    size = 0
    for value in inputs:
        if isinstance(value, torch.Tensor):
            if value.requires_grad and torch.is_grad_enabled():
                return False
            size += value.numel() * value.element_size()
    return size <= MAX_INPUT_BYTES


def _time(fn: Callable[[], Any], cuda: bool) -> float:
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - started


def measure(
    compiled: Callable[..., Any], graph: Graph, inputs: Sequence[Any]
) -> tuple[float, float]:
    """Fastest seconds per call of the compiled callable and of the interpreter on `inputs`
    (the minimum: noise on a shared machine only ever adds time)."""
    copies = clone_inputs(inputs)
    cuda = any(isinstance(v, torch.Tensor) and v.is_cuda for v in inputs)
    eager = Interpreter(graph)
    compiled_times: list[float] = []
    eager_times: list[float] = []
    started = time.perf_counter()
    with torch.no_grad():
        for _ in range(REPEATS):
            compiled_times.append(_time(lambda: compiled(*copies), cuda))
            eager_times.append(_time(lambda: eager(*copies), cuda))
            if time.perf_counter() - started > BUDGET_S:  # a big graph: one pair says enough
                break
    return min(compiled_times), min(eager_times)


def likely_cause(graph: Graph, eager_s: float, breaks: int) -> str:
    """The most likely reason a compiled graph loses to eager, in the user's terms."""
    library = sum(any(word in node.target for word in LIBRARY_OPS) for node in graph.nodes)
    if breaks:
        return (
            f"{breaks} graph break(s) split this function into small graphs, each paying "
            "a call's overhead and fusing less; EMBER_LOGS=graph_breaks names them"
        )
    if eager_s < 100e-6 or len(graph.nodes) <= 3:
        return (
            f"small kernels: the graph runs {len(graph.nodes)} op(s) in {eager_s * 1e6:.0f} µs "
            "eagerly, so a compiled call's fixed overhead dominates; compile a larger region, "
            "or use mode='reduce-overhead' on a GPU"
        )
    if library and library * 3 >= len(graph.nodes):
        return (
            f"extern-bound: {library} of its {len(graph.nodes)} ops are library calls (matmul, "
            "convolution, attention) that run the same vendor kernels compiled or not"
        )
    return "no single cause stands out; EMBER_LOGS=perf_hints,output_code shows the generated code"


def slower_message(
    graph: Graph, where: str, compiled_s: float, eager_s: float, breaks: int
) -> str | None:
    """The warning for these timings, or None when the compiled graph is not measurably slower."""
    if compiled_s < eager_s * RATIO or compiled_s - eager_s < MARGIN_S:
        return None
    lines = "; ".join(source_lines(graph)) or "(no source lines recorded)"
    return (
        f"ember.compile: graph {graph.name} of {where} runs slower compiled than eager on its "
        f"inputs: {compiled_s * 1e3:.3f} ms vs {eager_s * 1e3:.3f} ms per call "
        f"({compiled_s / eager_s:.1f}x). Its lines: {lines}. Likely cause: "
        f"{likely_cause(graph, eager_s, breaks)}. EMBER_PERF_WARNINGS=0 silences this."
    )


def warn_slower(graph: Graph, message: str) -> None:
    """Issue `message` as a PerformanceWarning at the graph's first user line."""
    first = next((node.source for node in graph.nodes if node.source is not None), None)
    if first is None:
        warnings.warn(message, PerformanceWarning, stacklevel=2)
        return
    warnings.warn_explicit(message, PerformanceWarning, first.file, first.line)
