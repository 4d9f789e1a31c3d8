"""The backend's callable with ember's diagnostics around it.

`compile_checked` calls the backend on a captured Graph. When the backend raises, the error
keeps its type and gains a note naming the user's function and, under `EMBER_REPRO`, the
repro directory (ember-prims' `record_failure`: the Graph, its inputs, repro.py, minified
with `EMBER_REPRO=minify`). The callable it returns (`CheckedGraph`) does the same for errors
at run time, compares its first call with the interpreter under `EMBER_ACCURACY_CHECK`
(raising `AccuracyError`), and times one call against eager after warm-up for the
performance warning. Once its checks are done a call costs one extra Python call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ember.capture.config import CaptureConfig
from ember.capture.errors import AccuracyError
from ember.capture.perf_warning import (
    WARM_UP_CALLS,
    has_random_ops,
    measurable,
    measure,
    slower_message,
    source_lines,
    warn_slower,
)
from ember.prims import Graph, Interpreter
from ember.prims.config import load
from ember.prims.minify import Failure, FailureKind, clone_inputs, compare, record_failure

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
QUIET_CALL_TRIES = 20  # calls to wait for no other thread in a checked call before timing

_lock = threading.Lock()
_in_flight = 0  # checked calls running now, in every thread


class Frame:
    """What the diagnostics say about the compiled function: its name and line, and how many
    graph breaks it has (read when a warning needs it)."""

    def __init__(self, where: str, breaks: Callable[[], int]) -> None:
        self.where = where
        self.breaks = breaks


def compile_checked(
    backend: Callable[..., Callable[..., Any]],
    graph: Graph,
    example_inputs: Sequence[Any],
    frame: Frame,
) -> Callable[..., Any]:
    """`backend(graph, example_inputs)`, with the diagnostics `CaptureConfig` switches on."""
    config = load(CaptureConfig)
    copies = clone_inputs(example_inputs) if config.repro != "off" else []
    try:
        compiled = backend(graph, example_inputs)
    except Exception as error:
        failure = Failure(FailureKind.COMPILE, type(error).__name__, str(error))
        _note(error, "compiling", graph, frame, _record(config, backend, graph, copies, failure))
        raise
    if config.repro == "off" and not config.accuracy_check and not config.perf_warnings:
        return compiled
    return CheckedGraph(compiled, backend, graph, frame, config)


def replays_cuda_graphs(backend: Callable[..., Any]) -> bool:
    """Whether `backend` was given a mode that replays CUDA graphs (torch.compile's names):
    its outputs live in the graph's static memory, so timing extra calls would overwrite the
    results the user holds. Those graphs are not timed."""
    keywords = getattr(backend, "keywords", None) or {}
    return keywords.get("mode") in CUDA_GRAPH_MODES


class CheckedGraph:
    """A compiled graph's callable that checks its calls until its checks are done."""

    def __init__(
        self,
        compiled: Callable[..., Any],
        backend: Callable[..., Callable[..., Any]],
        graph: Graph,
        frame: Frame,
        config: CaptureConfig,
    ) -> None:
        self.compiled = compiled
        self.backend = backend
        self.graph = graph
        self.frame = frame
        self.config = config
        self.calls = 0
        self.accuracy_pending = config.accuracy_check and not has_random_ops(graph)
        self.perf_pending = config.perf_warnings and not replays_cuda_graphs(backend)
        self.plain = False  # True: every check is done, calls go straight through

    def __call__(self, *inputs: Any) -> Any:
        if self.plain:
            return self.compiled(*inputs)
        return self._checked(inputs)

    def _checked(self, inputs: tuple[Any, ...]) -> Any:
        global _in_flight
        with _lock:
            _in_flight += 1
        try:
            return self._checked_call(inputs)
        finally:
            with _lock:
                _in_flight -= 1

    def _checked_call(self, inputs: tuple[Any, ...]) -> Any:
        self.calls += 1
        # copies before the call only for the accuracy check; a repro of a runtime error
        # takes the inputs as the failed call left them (no copy on every call)
        copies = clone_inputs(inputs) if self.accuracy_pending else []
        try:
            result = self.compiled(*inputs)
        except Exception as error:
            failure = Failure(FailureKind.RUNTIME, type(error).__name__, str(error))
            given = copies or clone_inputs(inputs)
            directory = _record(self.config, self.backend, self.graph, given, failure)
            _note(error, "running", self.graph, self.frame, directory)
            raise
        if self.accuracy_pending:
            self.accuracy_pending = False
            self._check_accuracy(copies, result)
        if self.perf_pending and self.calls > WARM_UP_CALLS:
            # other threads in checked calls would time themselves into this measurement:
            # wait for a quiet call, and give up after a while
            if _in_flight == 1 or self.calls > WARM_UP_CALLS + QUIET_CALL_TRIES:
                self.perf_pending = False
                if _in_flight == 1:
                    self._check_speed(inputs)
        self.plain = (
            self.config.repro == "off" and not self.accuracy_pending and not self.perf_pending
        )
        return result

    def _check_accuracy(self, inputs: list[Any], result: Any) -> None:
        reference = clone_inputs(inputs)
        with torch.no_grad():
            expected = Interpreter(self.graph)(*reference)
        mismatch = compare(expected, result)
        if mismatch is None:
            return
        failure = Failure(FailureKind.ACCURACY, "mismatch", mismatch)
        directory = _record(self.config, self.backend, self.graph, inputs, failure)
        lines = "; ".join(source_lines(_repro_graph(directory) or self.graph))
        where = f" (the repro's lines: {lines})" if lines else ""
        saved = (
            f" A repro is in {directory}: python {directory}/repro.py."
            if directory
            else " EMBER_REPRO=minify writes a minimal repro."
        )
        raise AccuracyError(
            f"ember.compile: graph {self.graph.name} of {self.frame.where} computes a different "
            f"result than eager{where}: {mismatch}.{saved} Compile this function with "
            "backend='aot_eager' to tell the code generator from autodiff, or unset "
            "EMBER_ACCURACY_CHECK to skip the check.",
            repro=str(directory) if directory else None,
        )

    def _check_speed(self, inputs: tuple[Any, ...]) -> None:
        if not measurable(self.graph, inputs):
            return
        compiled_s, eager_s = measure(self.compiled, self.graph, inputs)
        breaks = self.frame.breaks()
        if slower_message(self.graph, self.frame.where, compiled_s, eager_s, breaks) is None:
            return
        compiled_s, eager_s = measure(self.compiled, self.graph, inputs)  # confirm it
        message = slower_message(self.graph, self.frame.where, compiled_s, eager_s, breaks)
        if message is not None:
            warn_slower(self.graph, message)


def _record(
    config: CaptureConfig,
    backend: Callable[..., Callable[..., Any]],
    graph: Graph,
    inputs: list[Any],
    failure: Failure,
) -> str | None:
    if config.repro == "off" or (not inputs and graph.user_inputs()):
        return None
    directory = record_failure(
        config.repro_dir,
        backend,
        graph,
        inputs,
        failure,
        minify=config.repro == "minify",
        check_accuracy=failure.kind is FailureKind.ACCURACY,
    )
    return str(directory) if directory is not None else None


def _repro_graph(directory: str | None) -> Graph | None:
    if directory is None:
        return None
    from ember.prims import load as load_graph

    try:
        return load_graph(f"{directory}/graph.ember")
    except Exception:  # noqa: BLE001 - the message falls back to the whole graph's lines
        return None


def _note(error: Exception, doing: str, graph: Graph, frame: Frame, directory: str | None) -> None:
    lines = "; ".join(source_lines(graph, limit=3))
    repro = (
        f"a repro is in {directory} (python {directory}/repro.py)"
        if directory
        else "EMBER_REPRO=minify writes a minimal repro of it"
    )
    error.add_note(
        f"ember.compile: the backend failed while {doing} graph {graph.name} of "
        f"{frame.where} (lines {lines}); {repro}."
    )
